"""Batches of layers for the analyses: on an accelerator, as many layers per batched call as a fixed transient allows.

An analysis that decomposes one matrix per layer runs its layers in batches, one batched call (and no host read)
per batch: on an accelerator the launches and synchronisations then do not grow with depth, and the transient
stays below ``BATCH_BYTES`` beside the statistics whatever the model's depth (one layer at least). On the devices
of ``LAYER_AT_A_TIME`` (the CPU) each batch is one layer: a CPU has no launches to save, and one layer's matrices
stay in its caches (E6's fits of 6 layers at width 384 and 768, float32, one thread: 0.89-0.94 s and 6.0-6.6 s one
layer at a time against 1.35-2.22 s and 9.3-12.2 s all at once; benchmarks/RESULTS.md).
"""

from __future__ import annotations

import torch

BATCH_BYTES = 2**29  # 512 MiB of transient per batch (E6 on SmolLM2: 4 layers of fits per batch)
LAYER_AT_A_TIME = {"cpu"}


def per_batch(count: int, each: int, device: torch.device | None = None) -> int:
    """Layers per batch: ``count`` layers of ``each`` transient bytes each, as many as ``BATCH_BYTES`` holds (one at
    least, ``count`` at most); one on a ``device`` in ``LAYER_AT_A_TIME`` and for ``device=None``, the memory
    estimates' case (``Estimator.analysis_bytes`` knows no device: it counts the CPU's one layer, and an
    accelerator's batch may hold up to ``BATCH_BYTES`` more)."""
    if count < 1 or each < 1:
        raise ValueError(f"count and each must be positive, got {count}, {each}")
    if device is None or torch.device(device).type in LAYER_AT_A_TIME:
        return 1
    return max(1, min(count, BATCH_BYTES // each))


def batches(count: int, each: int, device: torch.device | None = None) -> list[range]:
    """``range(count)`` cut into consecutive batches of ``per_batch(count, each, device)`` layers."""
    step = per_batch(count, each, device)
    return [range(a, min(a + step, count)) for a in range(0, count, step)]
