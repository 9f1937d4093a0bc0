"""``memory.read_in`` makes a memory-mapped tensor resident: the probe reads the resident size for its estimate and
free memory after it, and a checkpoint memory-mapped from disk is otherwise counted only once the first forward pass
has faulted it in (SmolLM2: 0.44 GiB resident after loading its 0.50 GiB of weights)."""

from __future__ import annotations

import pytest
import torch

from expattn import memory

MIB = 2**20


def _resident() -> int:
    with open("/proc/self/status") as fh:
        return memory._kib_field(fh.read(), "VmRSS")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float8_e4m3fn, torch.bool])
def test_a_memory_mapped_tensor_is_resident_after_read_in(tmp_path, dtype):
    size = 64 * MIB
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * size)
    mapped = torch.from_file(str(path), shared=True, size=size // dtype.itemsize, dtype=dtype)
    before = _resident()  # mapped, not yet read
    memory.read_in([mapped, torch.empty(0), torch.empty(0, device="meta")])
    grew = _resident() - before
    # every page read once: the whole mapping, give or take the interpreter's own pages meanwhile (1/8 either way)
    assert size * 7 // 8 <= grew <= size * 9 // 8, grew / MIB
