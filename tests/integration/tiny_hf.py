"""Tiny randomly initialised HuggingFace models of many architectures, saved with MiniLM's tokenizer.

``save_tiny(model_type, folder)`` builds ``AutoConfig.for_model(model_type, ...)`` at a width of 32
(4 heads, 2 layers, 2 key/value heads where the architecture groups them), initialises it with a
fixed seed, saves the backbone and copies the WordPiece tokenizer of the installed MiniLM package
(so every model reads the same 30,522-token vocabulary; nothing is downloaded).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import torch

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
    from expattn.probes.loading import minilm_dir

    return minilm_dir()


def copy_tokenizer(folder: Path) -> None:
    """MiniLM's tokenizer files into ``folder``."""
    source = minilm_tokenizer_dir()
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(source / name, folder / name)


def build_tiny(model_type: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """The randomly initialised backbone (encoder of T5) of ``model_type`` at the tiny sizes above."""
    from transformers import AutoConfig, AutoModel

    text = {} if model_type in VISION else {"vocab_size": 30_522, "pad_token_id": 0, "bos_token_id": 101,
                                            "eos_token_id": 102}
    options = {**WIDTH, **text, **ARCHITECTURES[model_type], **overrides}
    config = AutoConfig.for_model(model_type, **options)
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
