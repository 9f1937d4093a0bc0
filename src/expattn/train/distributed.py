"""One process or many: the process group under ``torchrun`` (gloo on CPU, NCCL on GPU).

Every process draws the same global batch from the same seeded generator and keeps its own
contiguous slice; DistributedDataParallel averages the gradients, so with equal slices the
update is that of one process on the whole batch (up to floating-point summation order).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor


@dataclass(frozen=True)
class Dist:
    """Where this process sits.

    Attributes:
        rank, world: this process's index and the number of processes.
        device: the device this process computes on.
        active: whether a process group was started (``torchrun``).
    """

    rank: int
    world: int
    device: torch.device
    active: bool

    @property
    def main(self) -> bool:
        """True on the process that writes files and draws the progress bar."""
        return self.rank == 0

    def shard(self, batch: Tensor) -> Tensor:
        """This process's contiguous slice of a global batch along axis 0."""
        per = batch.shape[0] // self.world
        return batch[self.rank * per : (self.rank + 1) * per]

    def mean(self, value: float) -> float:
        """Average of ``value`` over the processes (itself on one process)."""
        if not self.active:
            return value
        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(t)
        return t.item() / self.world

    def barrier(self) -> None:
        if self.active:
            dist.barrier()


def resolve_device(device: str) -> torch.device:
    """``"auto"`` picks CUDA when available, else CPU; ``cpu`` and ``cuda[:i]`` are passed to torch.

    Raises:
        ValueError: any other device (``meta``, ``mps``, a typo), or CUDA asked for and not available.
    """
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError:
        resolved = None
    if resolved is None or resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:i]', got {device!r}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available")
    return resolved


def start(device: str = "auto") -> Dist:
    """Join the process group if ``torchrun`` launched us (``WORLD_SIZE`` set), else run alone."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dev = resolve_device(device)
    if world == 1 and not dist.is_initialized():
        return Dist(0, 1, dev, False)
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if dev.type == "cuda":
        dev = torch.device("cuda", local)
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return Dist(dist.get_rank(), dist.get_world_size(), dev, True)


def stop(d: Dist) -> None:
    """Leave the process group started by ``start``."""
    if d.active and dist.is_initialized():
        dist.destroy_process_group()
