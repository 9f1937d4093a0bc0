"""Batches of layers for the analyses: as many layers per batched call as a fixed transient allows.

An analysis that decomposes one matrix per layer runs its layers in batches, one batched call (and no host read)
per batch: on an accelerator the launches and synchronisations then do not grow with depth, and the transient
stays below ``BATCH_BYTES`` beside the statistics whatever the model's depth (one layer at least).
"""

from __future__ import annotations

BATCH_BYTES = 2**29  # 512 MiB of transient per batch (E6 on SmolLM2: 4 layers of fits per batch)


def per_batch(count: int, each: int) -> int:
    """Layers per batch: ``count`` layers of ``each`` transient bytes each, as many as ``BATCH_BYTES`` holds (one at
    least, ``count`` at most)."""
    if count < 1 or each < 1:
        raise ValueError(f"count and each must be positive, got {count}, {each}")
    return max(1, min(count, BATCH_BYTES // each))


def batches(count: int, each: int) -> list[range]:
    """``range(count)`` cut into consecutive batches of ``per_batch(count, each)`` layers."""
    step = per_batch(count, each)
    return [range(a, min(a + step, count)) for a in range(0, count, step)]
