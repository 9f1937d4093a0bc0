"""The probe's steps 2 and 3, *feed* and *merge*: the model runs batch by batch with forward hooks and the
estimators update their streaming statistics block by block; under ``torchrun`` rank 0 then merges
every process's statistics.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import torch

from expattn.probes.hypotheses.base import Batch, ProbeContext
from expattn.probes.models.acceptance import check_heads
from expattn.probes.models.adapters import Capture
from expattn.probes.models.subject import Subject
from expattn.probes.overlap import UpdateWorker, overlap_available
from expattn.probes.statistics.stats import poisson_weights
from expattn.results.record import error_record

TRIM_SLACK = 0.10  # relative growth of the resident size that triggers a heap trim (see _heap_trimmer)


def _heap_trimmer() -> Callable[[], None] | None:
    """After each batch: glibc's ``malloc_trim(0)`` when the resident size has grown more than
    ``TRIM_SLACK`` over its size after the first batch (None where there is no glibc or /proc).

    Each batch frees tens of MiB of activations; glibc keeps freed heap pages mapped and
    fragmentation lets the heap creep up over hundreds of batches, so without trimming the peak
    depends on the run's length. Trimming after every batch would make the next forward pass
    fault those pages in again (~0.5 s per 20,000 MiniLM tokens), hence the threshold.
    """
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None or not Path("/proc/self/statm").exists():
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    first: list[int] = []

    def resident() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * page

    def after_batch() -> None:
        now = resident()
        if not first:
            first.append(now)
        elif now > first[0] * (1 + TRIM_SLACK):
            trim(0)

    return after_batch


def _batch(indices: list[int], seed: int, replicates: int) -> Batch:
    index = torch.tensor(indices)
    return Batch(index=index, weights=poisson_weights(seed, index, replicates))


@dataclass
class Feeding:
    """What step 2 (*feed*) measured: wall and CPU seconds of the forward passes and of the statistics.
    ``overlapped``: the statistics ran in a worker thread, and ``forward`` excludes them already. ``failed``: claim ->
    the ``error`` record of an estimator whose update raised (it is not updated again; the others go on)."""

    forward: float = 0.0
    forward_cpu: float = 0.0
    stats_cpu: float = 0.0
    per_estimator: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    checked: float = 0.0
    overlapped: bool = False


def feed(subject: Subject, ctx: ProbeContext, estimators: list, batches: list[list[int]],
         inputs: Callable[[int], torch.Tensor], config, progress, rank: int, world: int,
         overlap: bool | None = None) -> Feeding:
    """Step 2: run the model over ``batches`` (sequence indices; ``inputs(index)`` their token ids) with the
    estimators updated block by block. On the first batch every head's recomputed attention is checked
    against the model's own (``expattn.probes.models.acceptance``) wherever the adapter can recompute it.
    ``overlap``: the updates run in a worker thread while the model computes on (``expattn.probes.overlap``;
    bitwise the same statistics); ``None``: where that can help (one CPU process with a core to spare) and is
    safe: not for an adapter of the generic reading (``adapter.reading``), whose estimators recompute attention
    by calling the model's own modules, which carry the capture's hooks and taps (not thread-safe)."""
    if overlap is None:
        overlap = world == 1 and subject.adapter.reading is None and overlap_available(subject.device)
    fed = Feeding(per_estimator=dict.fromkeys((est.claim for est in estimators), 0.0), overlapped=overlap)
    state: dict = {"batch": None, "check": recomputable(subject)}
    eps = float(torch.finfo(subject.dtype).eps)
    cast = subject.dtype != torch.float32

    def update(i: int, tensors: dict[str, torch.Tensor], batch: Batch, check: bool) -> None:
        if cast:
            tensors = _as_float32(tensors)
        if check:
            fed.checked = max(fed.checked, check_heads(i, tensors, ctx.attention[i], eps))
        batch.shared.clear()  # statistics shared between estimators live for one block
        for est in estimators:
            if est.claim in fed.failed:
                continue
            t0 = time.perf_counter()
            try:
                est.update(i, tensors, batch)
            except Exception as err:  # a bug or crash of one estimator: its record reads error, the others go on
                fed.failed[est.claim] = error_record(est.claim, "empirical", "update", err)
            fed.per_estimator[est.claim] += time.perf_counter() - t0

    def on_block(i: int, tensors: dict[str, torch.Tensor]) -> None:
        if worker is not None:  # the batch and the check flag as they are now, not when the job runs
            worker.submit(update, i, tensors, state["batch"], state["check"])
            return
        c0 = time.process_time()
        update(i, tensors, state["batch"], state["check"])
        fed.stats_cpu += time.process_time() - c0

    trim = _heap_trimmer()
    capture = subject.adapter.capture or Capture
    worker = UpdateWorker() if overlap else None
    with torch.no_grad(), capture(subject.model, subject.adapter, on_block), worker or nullcontext():
        for done, indices in enumerate(batches if estimators else [], start=1):
            rows = torch.stack([inputs(i) for i in indices]).to(subject.device)
            state["batch"] = _batch(indices, config.seed, config.replicates)
            t0, c0 = time.perf_counter(), time.process_time()
            if subject.image is not None:
                subject.model(pixel_values=rows.to(subject.dtype))
            else:
                subject.model(input_ids=rows, attention_mask=torch.ones_like(rows), **subject.kwargs)
            fed.forward += time.perf_counter() - t0
            fed.forward_cpu += time.process_time() - c0
            state["check"] = False
            if trim is not None:
                trim()
            if progress is not None and rank == 0:
                progress(min(config.tokens, done * world * config.batch_size * config.seq_len), config.tokens)
        if worker is not None:  # forward: without the waits for the worker; the statistics' CPU: the worker's
            fed.forward -= worker.blocked_seconds
            c0 = time.process_time()
            worker.drain()
            fed.forward_cpu += time.process_time() - c0
    if worker is not None:
        fed.stats_cpu = worker.cpu_seconds
    return fed


def recomputable(subject: Subject) -> bool:
    """Whether the adapter recomputes the model's attention: a generic adapter that reads the kernel, or a
    hand-written one on a model where E5 applies (expattn's LMs with a non-softmax carrier are not)."""
    reading = subject.adapter.reading
    if reading is not None:
        return reading.recomputable
    return "E5" not in subject.adapter.inapplicable(subject.model)


def _as_float32(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The same names in float32, one cast per distinct tensor (names sharing a tensor keep sharing it)."""
    cast: dict[int, torch.Tensor] = {}
    return {k: cast.setdefault(id(v), v.float()) for k, v in tensors.items()}


def merge(estimators: list, fed: Feeding, rank: int, world: int) -> tuple[float, float]:
    """Step 3: under ``torchrun``, rank 0 merges every process's fitted statistics and failures (an estimator
    that failed on any process is not merged); returns the slowest process's forward and statistics seconds."""
    stats_seconds = sum(fed.per_estimator.values())
    if world == 1:
        return fed.forward, stats_seconds
    gathered: list = [None] * world
    torch.distributed.all_gather_object(gathered, [estimators, fed.forward, stats_seconds, fed.failed])
    if rank == 0:
        for _, _, _, failed in gathered[1:]:
            fed.failed = failed | fed.failed
        for other, *_ in gathered[1:]:
            for est, theirs in zip(estimators, other, strict=True):
                if est.claim not in fed.failed:
                    est.merge(theirs)
    return max(g[1] for g in gathered), max(g[2] for g in gathered)
