"""Training checkpoints in one safetensors file: model, optimizer, RNG states; no pickle.

Layout of the tensors:
``model.<name>`` parameters and buffers (a tied parameter once), ``optim.<i>.<key>`` the
optimizer state of parameter ``i``, ``rng.<name>`` random generator states as uint8 tensors.
The header metadata holds JSON: the configs, the iteration, the optimizer's parameter groups,
the list of parts (which optimizer states and RNG states the file holds), and a SHA-256 of all of
these header fields and every tensor's bytes: everything a resume reads is covered, and a file that
lacks a part it lists, or a header field, is rejected with a message naming it. Writing goes
through a temporary file and a rename, so a crash leaves the previous checkpoint intact; loading
verifies the digest, keys and shapes before touching the model, so a corrupt file is rejected and
never half-loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import Tensor, nn

from expattn.results.files import write_bytes_atomic

FORMAT = "expattn.checkpoint/2"
# Header fields covered by the digest (all but the digest itself).
HASHED = ("format", "step", "meta", "param_groups", "parts")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read, fails its digest, or does not fit the model."""


@dataclass
class Checkpoint:
    """What a checkpoint holds once read and verified.

    Attributes:
        step: optimizer steps taken.
        meta: the JSON metadata written with it (configs, vocab, ...).
        model: parameter name -> tensor.
        optim: the optimizer's ``state_dict()``.
        rng: generator name -> uint8 state.
    """

    step: int
    meta: dict[str, Any]
    model: dict[str, Tensor]
    optim: dict[str, Any]
    rng: dict[str, Tensor]


def _digest(tensors: dict[str, Tensor], header: dict[str, str]) -> str:
    h = hashlib.sha256()
    for key in HASHED:
        h.update(f"{key}={len(header[key])}:{header[key]}|".encode())
    for name in sorted(tensors):
        t = tensors[name]
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def model_tensors(model: nn.Module) -> dict[str, Tensor]:
    """Parameters (each shared one once) and buffers, by name, as CPU tensors."""
    named = dict(model.named_parameters())
    named.update(dict(model.named_buffers()))
    return {name: t.detach().cpu() for name, t in named.items()}


def save_checkpoint(
    path: str | os.PathLike,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    rng: dict[str, Tensor],
    meta: dict[str, Any],
) -> Path:
    """Write the checkpoint of ``step`` atomically (temporary file, fsync, rename)."""
    path = Path(path)
    tensors = {f"model.{k}": v for k, v in model_tensors(model).items()}
    state = optimizer.state_dict()
    for i, entry in state["state"].items():
        for key, value in entry.items():
            if not isinstance(value, Tensor):
                raise TypeError(f"optimizer state {key!r} of parameter {i} is {type(value).__name__}, not a tensor")
            tensors[f"optim.{i}.{key}"] = value.detach().cpu()
    for name, value in rng.items():
        if value.dtype != torch.uint8:
            raise TypeError(f"rng state {name!r} must be a uint8 tensor, got {value.dtype}")
        tensors[f"rng.{name}"] = value.cpu()
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    parts = {"optim": {str(i): sorted(entry) for i, entry in state["state"].items()}, "rng": sorted(rng)}
    header = {
        "format": FORMAT,
        "step": str(step),
        "meta": json.dumps(meta),
        "param_groups": json.dumps(state["param_groups"]),
        "parts": json.dumps(parts),
    }
    header["sha256"] = _digest(tensors, header)
    data = st_save(tensors, metadata=header)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, data, durable=True)
    return path


def _header(data: bytes, path: Path) -> dict[str, str]:
    if len(data) < 8:
        raise CheckpointError(f"checkpoint {str(path)!r} is truncated ({len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    try:
        header = json.loads(data[8 : 8 + n])
        meta = header["__metadata__"]
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"checkpoint {str(path)!r} has an unreadable header") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {str(path)!r} is not an {FORMAT} file")
    return meta


def read_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Read and verify a checkpoint (format, digest); raise ``CheckpointError`` if corrupt."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: {err.strerror}") from err
    header = _header(data, path)
    for key in (*HASHED, "sha256"):
        if not isinstance(header.get(key), str):
            raise CheckpointError(f"checkpoint {str(path)!r} lacks its header field {key!r}")
    try:
        tensors = st_load(data)
    except Exception as err:  # safetensors raises its own error type for bad byte ranges
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt: {err}") from err
    if _digest(tensors, header) != header["sha256"]:
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt: its SHA-256 does not match its contents")
    try:
        step = int(header["step"])
        meta = json.loads(header["meta"])
        groups = json.loads(header["param_groups"])
        parts = json.loads(header["parts"])
    except ValueError as err:
        raise CheckpointError(f"checkpoint {str(path)!r} has an unreadable header field: {err}") from err
    _check_parts(tensors, parts, path)
    model = {k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")}
    rng = {k[len("rng.") :]: v for k, v in tensors.items() if k.startswith("rng.")}
    state: dict[int, dict[str, Tensor]] = {}
    for k, v in tensors.items():
        if k.startswith("optim."):
            _, i, key = k.split(".", 2)
            state.setdefault(int(i), {})[key] = v
    return Checkpoint(step, meta, model, {"state": state, "param_groups": groups}, rng)


def _check_parts(tensors: dict[str, Tensor], parts: object, path: Path) -> None:
    """Every optimizer and RNG state the header lists is present, and nothing else."""
    if not (isinstance(parts, dict) and isinstance(parts.get("optim"), dict) and isinstance(parts.get("rng"), list)):
        raise CheckpointError(f"checkpoint {str(path)!r} has an unreadable list of parts")
    listed = {f"optim.{i}.{key}" for i, keys in parts["optim"].items() for key in keys}
    listed |= {f"rng.{name}" for name in parts["rng"]}
    held = {k for k in tensors if k.startswith(("optim.", "rng."))}
    if listed - held:
        first = sorted(listed - held)[0]
        what = "optimizer state" if first.startswith("optim.") else "RNG state"
        raise CheckpointError(f"checkpoint {str(path)!r} lacks its {what} {first!r}")
    if held - listed:
        raise CheckpointError(f"checkpoint {str(path)!r} holds an unlisted state {sorted(held - listed)[0]!r}")


def restore(ckpt: Checkpoint, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Copy a verified checkpoint into ``model`` and ``optimizer``; check everything first."""
    target = dict(model.named_parameters())
    target.update(dict(model.named_buffers()))
    if set(target) != set(ckpt.model):
        missing, extra = sorted(set(target) - set(ckpt.model)), sorted(set(ckpt.model) - set(target))
        raise CheckpointError(f"checkpoint does not fit the model: missing {missing[:3]}, unexpected {extra[:3]}")
    for name, t in target.items():
        if t.shape != ckpt.model[name].shape:
            raise CheckpointError(
                f"checkpoint tensor {name!r} has shape {tuple(ckpt.model[name].shape)}, model has {tuple(t.shape)}"
            )
    own_groups = optimizer.state_dict()["param_groups"]
    if [len(g["params"]) for g in own_groups] != [len(g["params"]) for g in ckpt.optim["param_groups"]]:
        raise CheckpointError("checkpoint optimizer groups do not fit the model's parameters")
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i, entry in ckpt.optim["state"].items():
        if i >= len(params):
            raise CheckpointError(f"checkpoint optimizer state names parameter {i}; the model has {len(params)}")
        for key, value in entry.items():
            if value.ndim and value.shape != params[i].shape:
                raise CheckpointError(f"checkpoint optimizer state {key!r} of parameter {i} has the wrong shape")
    with torch.no_grad():
        for name, t in target.items():
            t.copy_(ckpt.model[name])
    optimizer.load_state_dict(ckpt.optim)
