"""Memory checks before a run starts: refuse at once with what is needed and what there is, instead of
failing later inside the allocator (``MemoryError``, a CUDA out-of-memory traceback) or swapping.

The estimates are lower bounds (they count the large tensors and no allocator overhead), so a run
that is refused could not have run; a run that passes may still need somewhat more.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import torch

GIB = 2**30
PAGE = 4096  # bytes of the smallest memory page (x86-64's): read_in touches at least one element per page


def available_bytes(device: str | torch.device) -> int | None:
    """Free memory of ``device``: for the CPU ``host_available`` of ``/proc/meminfo`` and this process's
    ``/proc/self/status``, the driver's free memory for a CUDA device; ``None`` where it cannot be read (then
    nothing is refused)."""
    device = torch.device(device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return None
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo, open("/proc/self/status") as status:
            return host_available(meminfo.read(), status.read())
    except (OSError, ValueError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


def read_in(tensors: Iterable[torch.Tensor]) -> None:
    """Read one element per page of every CPU tensor in ``tensors``, so that weights a checkpoint left memory-mapped
    on disk are resident before the resident size is read: the first forward pass would fault them in anyway, and
    the estimate of a run and its free memory must count them (SmolLM2's 0.50 GiB of float32 weights were 0.44 GiB
    of resident size after loading and 0.93 after this, in 0.18 s; benchmarks/RESULTS.md)."""
    with torch.no_grad():
        for t in tensors:
            if t.device.type == "cpu" and t.numel() and t.is_contiguous():  # a strided view would be copied
                t.detach().view(-1).view(torch.uint8)[::PAGE].sum()  # as bytes: any dtype, one per page


def host_available(meminfo: str, status: str) -> int:
    r"""$\min(\text{MemAvailable}, \text{MemTotal} - \text{VmRSS})$ in bytes, from the texts of ``/proc/meminfo`` and
    ``/proc/self/status``: what this process is using is not free to it, whatever the kernel counts as
    reclaimable (a bfloat16 Qwen2.5 1.5B twin, holding 11.0 GiB of a 23.5 GiB machine, planned its passes on
    ``MemAvailable`` alone as if at least 14.3 GiB were free, which the plan it printed implies, and the
    resident size went to the machine's limit; benchmarks/RESULTS.md). ValueError when a field is missing."""
    return max(0, min(_kib_field(meminfo, "MemAvailable"),
                      _kib_field(meminfo, "MemTotal") - _kib_field(status, "VmRSS")))


def host_total() -> int | None:
    """The host's memory, ``MemTotal`` of ``/proc/meminfo``, in bytes; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as meminfo:
            return _kib_field(meminfo.read(), "MemTotal")
    except (OSError, ValueError):
        return None


def _kib_field(text: str, name: str) -> int:
    """The ``NAME:  N kB`` line of a ``/proc`` text, in bytes; ValueError when it is missing."""
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no {name} in the text given")


def held_bytes(device: str | torch.device) -> int | None:
    """Memory this process holds now on ``device``: its resident set (``VmRSS`` of ``/proc/self/status``: the
    interpreter, the libraries, the model's weights) for the CPU, the bytes torch's allocator holds for a CUDA
    device; ``None`` where it cannot be read."""
    device = torch.device(device)
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device)) if torch.cuda.is_available() else None
    try:
        with open("/proc/self/status") as fh:
            return _kib_field(fh.read(), "VmRSS")
    except (OSError, ValueError):
        return None


def readable(n: int) -> str:
    """``n`` bytes in GiB, or MiB below 0.1 GiB, to one decimal."""
    return f"{n / GIB:.1f} GiB" if n >= GIB / 10 else f"{n / 2**20:.1f} MiB"


def require(needed: int, device: str | torch.device, what: str, hint: str = "") -> None:
    """Raise ``ValueError`` naming ``what`` if ``needed`` bytes exceed the free memory of ``device``; ``hint``
    (how to need less) ends the message."""
    free = available_bytes(device)
    if free is not None and needed > free:
        raise ValueError(f"{what} needs at least {readable(needed)} of memory, but only {readable(free)} is available "
                         f"on {torch.device(device).type}" + (f"; {hint}" if hint else ""))


def training_bytes(params: int, batch: int, context: int, dim: int, layers: int, vocab: int) -> int:
    """Lower bound of a training step's memory: weights, gradients and AdamW's two moments (4 B each per
    parameter), the token batch (int64 inputs and targets), per layer a dozen float32 activations of
    ``(batch, context, dim)`` kept for backward, and the logits with their gradient."""
    tokens = batch * context
    return 16 * params + 16 * tokens + 4 * 12 * tokens * dim * layers + 8 * tokens * vocab


def probe_bytes(tokens: int, statistics: int = 0) -> int:
    """Lower bound of a probe's memory beside the model: the token ids (int64), their sequence index and the
    ``statistics`` bytes the estimators keep (``expattn.probes.footprint``)."""
    return 16 * tokens + statistics


def dynamics_bytes(batch: int, tokens: int, dim: int, keys: int) -> int:
    """Lower bound of one step of ``norm o attention`` on ``batch`` clouds in float64: the cloud, its image
    and the attention update (``(batch, token, dim)`` each) and the ``(batch, token, key)`` attention weights."""
    return 8 * batch * tokens * (3 * dim + keys)
