"""The probe's steps 2 and 3, *feed* and *merge*: the model runs batch by batch with forward hooks and the
estimators update their streaming statistics block by block; under ``torchrun`` rank 0 then merges
every process's statistics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from expattn.probes.hypotheses.base import Batch, ProbeContext
from expattn.probes.models.acceptance import check_heads
from expattn.probes.models.adapters import Capture
from expattn.probes.models.subject import Subject
from expattn.probes.overlap import speedups as speed_machinery
from expattn.probes.statistics.stats import poisson_weights
from expattn.results.record import error_record


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
         speedups: bool | None = None) -> Feeding:
    """Step 2: run the model over ``batches`` (sequence indices; ``inputs(index)`` their token ids) with the
    estimators updated block by block. On the first batch every head's recomputed attention is checked
    against the model's own (``expattn.probes.models.acceptance``) wherever the adapter can recompute it.
    ``speedups``: the one switch of the speed machinery (``expattn.probes.overlap``: the updates in a worker
    thread while the model computes on, and heap trimming; bitwise the same statistics); ``None``: each part where
    it helps and is safe. The worker is not safe for an adapter of the generic reading (``adapter.reading``), whose
    estimators recompute attention by calling the model's own modules, which carry the capture's hooks and taps,
    nor under ``torchrun``."""
    machinery = speed_machinery(speedups, subject.device, world == 1 and subject.adapter.reading is None)
    worker, trim = machinery.worker, machinery.trim
    fed = Feeding(per_estimator=dict.fromkeys((est.claim for est in estimators), 0.0), overlapped=worker is not None)
    state: dict = {"batch": None, "check": recomputable(subject)}
    cast = subject.dtype != torch.float32
    own = subject.adapter.attention  # a half-precision model is checked through its own weights, in its dtype

    def update(i: int, tensors: dict[str, torch.Tensor], batch: Batch, check: bool) -> None:
        if cast:
            tensors = _as_float32(tensors)
        if check:
            w = own(subject.model, i) if cast else ctx.attention[i]
            fed.checked = max(fed.checked, check_heads(i, tensors, w, subject.dtype))
        batch.shared.clear()  # statistics shared between estimators live for one block
        _update(estimators, i, tensors, batch, fed)

    def on_block(i: int, tensors: dict[str, torch.Tensor]) -> None:
        if worker is not None:  # the batch and the check flag as they are now, not when the job runs
            worker.submit(update, i, tensors, state["batch"], state["check"])
            return
        c0 = time.process_time()
        update(i, tensors, state["batch"], state["check"])
        fed.stats_cpu += time.process_time() - c0

    capture = subject.adapter.capture or Capture
    with torch.no_grad(), capture(subject.model, subject.adapter, on_block), worker or nullcontext():
        for done, indices in enumerate(batches if estimators else [], start=1):
            rows = torch.stack([inputs(i) for i in indices]).to(subject.device)
            state["batch"] = _batch(indices, config.seed, config.replicates)
            t0, c0 = time.perf_counter(), time.process_time()
            _forward(subject, rows)
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


def _update(estimators: list, i: int, tensors: dict[str, torch.Tensor], batch: Batch, fed: Feeding) -> None:
    """Every estimator not yet failed takes block ``i``'s tensors, timed into ``fed.per_estimator``; one that raises
    gets an error record in ``fed.failed`` (a bug or crash of one estimator: the others go on)."""
    for est in estimators:
        if est.claim in fed.failed:
            continue
        t0 = time.perf_counter()
        try:
            est.update(i, tensors, batch)
        except Exception as err:
            fed.failed[est.claim] = error_record(est.claim, "empirical", "update", err)
        fed.per_estimator[est.claim] += time.perf_counter() - t0


def _forward(subject: Subject, rows: torch.Tensor) -> None:
    """One forward pass of ``rows``: ``(batch, channels, height, width)`` images for a vision encoder, else
    ``(batch, seq_len)`` token ids with a full attention mask."""
    if subject.image is not None:
        subject.model(pixel_values=rows.to(subject.dtype))
    else:
        subject.model(input_ids=rows, attention_mask=torch.ones_like(rows), **subject.kwargs)


def recomputable(subject: Subject) -> bool:
    """Whether the adapter recomputes the model's softmax heads (``Adapter.offered``): not where the generic reading
    cannot read the kernel, nor on expattn's LMs with a non-softmax carrier."""
    return {"attention.softmax", "attention.recomputable"} <= subject.adapter.offered(subject.model)


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
