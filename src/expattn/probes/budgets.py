"""How many tokens a probe reads unless told: per built-in model, for the full and the quick report.

Each budget keeps the full report near 3 minutes on 2 CPU cores and gives E3's radius ratio the tokens it needs
to tell a sphere from a Gaussian (``e3_shape.buffer_size``).
"""

from __future__ import annotations

# Gemma 3 (width 640, 18 layers) at SmolLM2's budget (its timing: benchmarks/README.md)
DEFAULT_TOKENS = {"minilm": 20_000, "smollm2": 8_192, "gemma3": 8_192}
# quick: SmolLM2 (width 576) needs 1,024 kept tokens per depth for E3's radius ratio to tell a sphere from a
# Gaussian (``e3_shape.SPHERE_POWER``); at 768 tokens (762 kept) its sphere control passed or failed by the seed.
# Gemma 3 (width 640) needs 1,067 (``e3_shape.buffer_size``): 1,152 tokens keep 1,143
QUICK_TOKENS = {"minilm": 2_048, "smollm2": 1_152, "gemma3": 1_152}


def default_tokens(model: str, quick: bool = False) -> int:
    """The tokens a probe of ``model`` reads unless told: its entry in ``DEFAULT_TOKENS`` (``QUICK_TOKENS``), or
    20,000 (4,096) for any other model. The one source of that default for the CLI, the API and the report."""
    return (QUICK_TOKENS if quick else DEFAULT_TOKENS).get(model, 4_096 if quick else 20_000)
