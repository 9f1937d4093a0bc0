"""How many tokens a probe reads unless told: per built-in model, for the full and the quick report.

Each budget keeps the full report within the main job's time (measured in benchmarks/README.md) and gives E3's
radius ratio the tokens it needs to tell a sphere from a Gaussian (``e3_shape.buffer_size``).
"""

from __future__ import annotations

# Gemma 3 (width 640, 18 layers) at SmolLM2's budget (its timing: benchmarks/README.md); Qwen2.5 0.5B and 1.5B too
DEFAULT_TOKENS = {"minilm": 20_000, "smollm2": 8_192, "gemma3": 8_192, "qwen2.5-0.5b": 8_192, "qwen2.5-1.5b": 8_192}
# quick: SmolLM2 (width 576) needs 1,024 kept tokens per depth for E3's radius ratio to tell a sphere from a
# Gaussian (``e3_shape.SPHERE_POWER``); at 768 tokens (762 kept) its sphere control passed or failed by the seed.
# Gemma 3 (width 640) needs 1,067 (``e3_shape.buffer_size``): 1,152 tokens keep 1,143; Qwen2.5 0.5B (896) 1,494
# and 1.5B (1,536) 2,560, so 1,536 and 2,688 (12 and 21 sequences of 128 tokens)
QUICK_TOKENS = {"minilm": 2_048, "smollm2": 1_152, "gemma3": 1_152, "qwen2.5-0.5b": 1_536, "qwen2.5-1.5b": 2_688}


def default_tokens(model: str, quick: bool = False) -> int:
    """The tokens a probe of ``model`` reads unless told: its entry in ``DEFAULT_TOKENS`` (``QUICK_TOKENS``), or
    20,000 (4,096) for any other model. The one source of that default for the CLI, the API and the report."""
    return (QUICK_TOKENS if quick else DEFAULT_TOKENS).get(model, 4_096 if quick else 20_000)


def budgets_text() -> str:
    """``DEFAULT_TOKENS`` as the CLI's help says it: the models of one budget together, then the others', e.g.
    ``minilm 20,000, smollm2 and gemma3 8,192, others 20,000``."""
    by_budget: dict[int, list[str]] = {}
    for model, tokens in DEFAULT_TOKENS.items():
        by_budget.setdefault(tokens, []).append(model)
    groups = [f"{', '.join(models[:-1])} and {models[-1]}" if len(models) > 1 else models[0]
              for models in by_budget.values()]
    return ", ".join(f"{group} {tokens:,}" for group, tokens in zip(groups, by_budget, strict=True)) + \
        f", others {default_tokens(''):,}"
