"""The probe's first step, *load*: the model under study with its tokenizer, adapter and provenance.

A ``Subject`` comes from a name or folder (``load_subject``: a built-in name, a local HuggingFace
folder, a model ID already in the local HuggingFace cache, or a folder of ``expattn train``) or
from a model already in memory (``subject_from_model``). Families with a hand-written adapter
(``expattn.probes.models.adapters``) use it; every other architecture is read from its module tree
(``expattn.probes.models.generic``). The model runs on ``device`` in ``dtype`` (``float32``,
``bfloat16``, ``float16``), or spread over the available devices with ``device_map="auto"``
(accelerate); under ``torchrun`` each rank takes ``cuda:LOCAL_RANK`` when CUDA is there.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from jaxtyping import Float
from torch import nn

import expattn.probes.models.lm_adapter  # noqa: F401  (registers the adapter of expattn's own LMs)
from expattn.probes.models.adapters import Adapter, adapter_for, supported_model_types
from expattn.probes.models.generic import forward_kwargs, read_model
from expattn.probes.models.loading import load_pretrained, read_config, resolve_model_dir

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Subject:
    """A loaded model and how the probe reads it.

    Attributes:
        model: the backbone in eval mode; tokenizer: its tokenizer (None for an in-memory model fed ids).
        adapter: hand-written or read from the module tree.
        name: as given (``minilm``, a folder, a model ID, or the class name of an in-memory model).
        path: folder it came from (None in memory); model_type: ``config.model_type``.
        config: the model's config as a dict; kwargs: extra keyword arguments of every forward call.
        image: ``(channels, height, width)`` of the model's input images for a vision encoder (ViT: fed
            ``pixel_values``, a synthetic image set), None for a text model (fed ``input_ids``).
    """

    model: nn.Module
    tokenizer: object | None
    adapter: Adapter
    name: str
    path: Path | None
    model_type: str
    config: dict
    kwargs: dict
    image: tuple[int, int, int] | None = None

    @property
    def image_tokens(self) -> int:
        """Tokens of one image: its patches plus the [CLS] token."""
        side = self.image[1] // int(self.config["patch_size"])
        return side * side + 1

    @property
    def device(self) -> torch.device:
        """Where the inputs go: the device of the first parameter (the embedding under a device map)."""
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype


def parse_dtype(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``"bfloat16"`` or ``torch.bfloat16`` -> ``torch.bfloat16``; ValueError naming the choices otherwise."""
    if dtype is None or (isinstance(dtype, torch.dtype) and dtype in DTYPES.values()):
        return dtype
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def parse_device(device: str | torch.device | None) -> torch.device | None:
    """``cpu``, ``cuda``, ``cuda:N`` (or None: cpu, or ``cuda:LOCAL_RANK`` under torchrun with CUDA)."""
    if device is None:
        if "LOCAL_RANK" in os.environ and torch.cuda.is_available():
            return torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        return None
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device must be cpu, cuda or cuda:N, got {device!r}") from err
    if parsed.type == "meta":  # meta tensors hold no values: nothing could be measured on them
        raise ValueError(f"device must be cpu, cuda or cuda:N, got {device!r} (meta tensors hold no values to probe)")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but CUDA is not available on this machine")
    return parsed


def place(model: nn.Module, device: torch.device | None, dtype: torch.dtype | None) -> nn.Module:
    """``model`` moved to ``device`` and cast to ``dtype`` (each when given); with an indexed CUDA device
    (``cuda:N``, as under torchrun) sets the CUDA device of this process so that collectives (NCCL) use it.
    Plain ``cuda`` means the current device: nothing to set (``torch.cuda.set_device`` refuses an unindexed
    device)."""
    if device is not None and device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    if dtype is not None:
        model = model.to(dtype)
    if device is not None:
        model = model.to(device)
    return model


def image_shape(model: nn.Module) -> tuple[int, int, int] | None:
    """``(channels, size, size)`` when ``model`` takes ``pixel_values`` and no ``input_ids`` (ViT), else None."""
    params = inspect.signature(model.forward).parameters
    if "pixel_values" not in params or "input_ids" in params:
        return None
    size = model.config.image_size
    return int(model.config.num_channels), int(size), int(size)


def adapter_of(model: nn.Module, model_type: str, vocab: int | None) -> Adapter:
    """The hand-written adapter of ``model_type``, or one read from the module tree (a forward pass on 8
    random tokens or one random image; ValueError when the architecture cannot be read)."""
    if model_type in supported_model_types():
        return adapter_for(model_type)
    param = next(model.parameters())
    gen = torch.Generator().manual_seed(0)
    image = image_shape(model)
    if image is not None:
        pixels = torch.randn(1, *image, generator=gen).to(param.device, param.dtype)
        return read_model(model, model_type, lambda: model(pixel_values=pixels))
    ids = torch.randint(0, max(2, vocab or 2), (1, 8), generator=gen).to(param.device)
    mask = torch.ones_like(ids)
    return read_model(model, model_type, lambda: model(input_ids=ids, attention_mask=mask, **forward_kwargs(model)))


def synthetic_image(shape: tuple[int, int, int], seed: int, index: int) -> Float[torch.Tensor, "channels height width"]:
    """Image ``index`` of the synthetic set, ``shape`` = ``(channels, height, width)``: smooth random fields (a 4x4
    grid of N(0, 1) per channel, upsampled bilinearly) plus N(0, 0.1^2) pixel noise, from
    ``Generator([seed, index])``-style seeding."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + index)
    coarse = torch.randn(1, shape[0], 4, 4, generator=gen)
    smooth = torch.nn.functional.interpolate(coarse, size=shape[1:], mode="bilinear", align_corners=False)[0]
    return smooth + 0.1 * torch.randn(shape, generator=gen)


def subject_from_model(model: nn.Module, tokenizer: object | None = None, *, name: str | None = None,
                       device: str | None = None, dtype: str | torch.dtype | None = None) -> Subject:
    """A ``Subject`` for a HuggingFace backbone (or a model with one under ``.model``/``.base_model``) in memory."""
    if not isinstance(model, nn.Module) or not hasattr(model, "config"):
        raise TypeError(f"model must be a HuggingFace transformers model (an nn.Module with .config), "
                        f"got {type(model).__name__}")
    model = place(_backbone(model), parse_device(device), parse_dtype(dtype)).eval()
    config = model.config.to_dict() if hasattr(model.config, "to_dict") else dict(vars(model.config))
    model_type = config.get("model_type") or type(model).__name__
    adapter = adapter_of(model, model_type, config.get("vocab_size"))
    return Subject(model, tokenizer, adapter, name or type(model).__name__, None, model_type, config,
                   forward_kwargs(model) if adapter.reading is not None else {}, image_shape(model))


def context_length(config: dict) -> int | None:
    """The longest sequence a model's ``config`` (a dict) admits, or None when it names none."""
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def check_context(config: dict, seq_len: int, name: str) -> None:
    """ValueError naming ``seq_len`` when it exceeds the context length of the model ``name`` (``context_length``)."""
    longest = context_length(config)
    if longest is not None and seq_len > longest:
        raise ValueError(f"seq_len {seq_len} exceeds the context length {longest} of {name}")


def subject_in_memory(model: nn.Module, tokenizer: object | None, seq_len: int, *, device: str | None = None,
                      dtype: str | torch.dtype | None = None) -> Subject:
    """``subject_from_model`` for a model handed in by the caller, checked for sequences of ``seq_len`` tokens.

    Raises:
        TypeError: ``model`` is not a HuggingFace model; ValueError: a bad device or dtype, or ``seq_len`` beyond
            the model's context length.
    """
    subject = subject_from_model(model, tokenizer, device=device, dtype=dtype)
    check_context(subject.config, seq_len, "the model")
    return subject


def open_subject(model: str, seq_len: int, *, device: str | None = None, dtype: str | None = None,
                 device_map: str | None = None, tokenizer: str | None = None) -> Subject:
    """The model named ``model`` (as ``expattn probe --model`` takes it: a built-in name, a folder, a cached model
    ID) with its tokenizer and adapter, on ``device`` in ``dtype`` (or spread by ``device_map="auto"``), for
    sequences of ``seq_len`` tokens. The settings and the model's config are checked before the weights are read.

    Raises:
        ValueError: a bad device, dtype, device map or tokenizer folder, an unknown model, an unreadable folder or
            architecture, no tokenizer, or ``seq_len`` beyond the model's context length.
    """
    place_on, cast_to = parse_device(device), parse_dtype(dtype)
    if device_map is not None and device_map != "auto":
        raise ValueError(f"device_map must be 'auto' (or None), got {device_map!r}")
    tokenizer_dir = None if tokenizer is None else Path(tokenizer)
    if tokenizer_dir is not None and not tokenizer_dir.is_dir():
        raise ValueError(f"tokenizer {tokenizer!r} is not a folder")
    path = resolve_model_dir(model)
    config = read_config(path)
    check_context(config, seq_len, model)
    loaded, tokenizer_object = load_pretrained(path, config, cast_to, device_map, tokenizer_dir)
    if device_map is None:
        loaded = place(loaded, place_on, None)
    subject = subject_from_model(loaded, tokenizer_object, name=model)
    subject.path, subject.model_type, subject.config = path, config["model_type"], config
    return subject


def _backbone(model: nn.Module) -> nn.Module:
    """The encoder of an encoder-decoder model, the base model of a model with a head, else ``model``."""
    if getattr(model.config, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
        return model.get_encoder()
    base = getattr(model, "base_model", None)
    return base if isinstance(base, nn.Module) and base is not model else model
