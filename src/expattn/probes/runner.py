"""``expattn probe``: measure the hypotheses of ``hypotheses.ESTIMATORS`` on a pretrained transformer and real text.

The model is a HuggingFace model directory (BERT, GPT-2, Llama families) or a folder written by
``expattn train`` (expattn's own LM). ``ProbeConfig.hypotheses`` chooses which estimators are
built and fed; a chosen hypothesis that cannot apply to the model (``hypotheses.inapplicable``: a capability or a
tensor it needs that the model reading does not offer, e.g. softmax heads under a non-softmax carrier, or its own
check) gets a ``skipped`` record with the reason; one whose
update or analysis raises gets an ``error`` record (the exception and its traceback), and the others are
still measured.

One pass over a deterministic token sample: the model runs batch by batch with forward hooks
(``expattn.probes.models.adapters.Capture``); after each block the estimators update their
streaming statistics from that block's tensors and the tensors are dropped. Under ``torchrun``
(gloo on CPU, NCCL on GPU) every process takes the batches ``rank, rank + world, ...`` and the
fitted statistics are merged on rank 0, which computes the records and draws the plots.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch
from jaxtyping import Int

from expattn import memory
from expattn.catalogue import headlines
from expattn.probes.analyses import records
from expattn.probes.config import ProbeConfig
from expattn.probes.drawings import Drawing, drawings
from expattn.probes.feeding import feed, merge
from expattn.probes.footprint import Footprint
from expattn.probes.hypotheses import ESTIMATORS, hypotheses, inapplicable
from expattn.probes.hypotheses.base import ProbeContext
from expattn.probes.models.corpus import Sequences, load_text, sequences
from expattn.probes.models.subject import Subject, open_subject
from expattn.probes.models.taps import Replay
from expattn.probes.models.twin import probe_twin
from expattn.probes.overlap import map_when_tight, release_heap
from expattn.probes.passes import plan, run_footprint
from expattn.probes.progress import Stage, reporter
from expattn.results.record import Record, results_document
from expattn.results.twin import attach_twin


@dataclass
class ProbeOutcome:
    """Records plus the run's provenance (what ``results.json`` stores beside them) and, on rank 0,
    the fitted (merged) estimators with their streaming statistics.

    The wall times are provenance, never in the records (the records of a seed are the same on every run):
    ``timings`` maps each measured hypothesis to its ``update_seconds`` (its statistics' updates during the
    forward passes) and ``result_seconds`` (its analysis), on rank 0."""

    records: list[Record]
    tokens: int
    sequences: int
    seconds: float
    forward_seconds: float
    stats_seconds: float
    forward_cpu_seconds: float
    stats_cpu_seconds: float
    model: dict
    config: dict
    timings: dict[str, dict[str, float]]
    drawings: dict[str, Drawing] = field(default_factory=dict)
    passes: list[list[str]] = field(default_factory=list)

    def document(self) -> dict:
        """The ``results.json`` object of this run (records plus provenance)."""
        return results_document(
            self.records, "probe", seeds={"seed": self.config["seed"]}, tokens=self.tokens,
            sequences=self.sequences, seconds=self.seconds, forward_seconds=self.forward_seconds,
            stats_seconds=self.stats_seconds, forward_cpu_seconds=self.forward_cpu_seconds,
            stats_cpu_seconds=self.stats_cpu_seconds, world_size=int(os.environ.get("WORLD_SIZE", "1")),
            model=self.model, config=self.config, timings=self.timings, passes=self.passes,
        )


def _distributed() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        return torch.distributed.get_rank(), world
    return 0, 1


def load(config: ProbeConfig) -> Subject:
    """Step 1: the model named by ``config`` with its tokenizer and adapter, on ``config.device`` in
    ``config.dtype``; every check of the settings against the machine and the model's folder comes first (the
    host's memory for the token sample, the device, dtype, device map and tokenizer folder, the model's config and
    its context length against ``seq_len``), so a bad setting fails before the weights are read.

    Raises:
        ValueError: no room for the token sample, a bad device, dtype, device map or tokenizer folder, an unknown
            model, an unreadable folder or architecture, no tokenizer, or ``seq_len`` beyond the context.
    """
    config.require_memory()
    return open_subject(config.model, config.seq_len, device=config.device, dtype=config.dtype,
                        device_map=config.device_map, tokenizer=config.tokenizer)


def context(subject: Subject, config: ProbeConfig, sequences: Sequences, deciding: bool = False) -> ProbeContext:
    """The fixed choices of a run on ``subject`` fed ``sequences`` (attention weights in float32 when the model
    is not); ``deciding``: ``ProbeContext.deciding``."""
    adapter, model = subject.adapter, subject.model
    layers = len(adapter.blocks(model))
    attention = tuple(adapter.attention(model, i) for i in range(layers))
    if subject.dtype != torch.float32:
        attention = tuple(w.to(torch.float32) for w in attention)
    return ProbeContext(
        model=model,
        adapter=adapter,
        attention=attention,
        layers=layers,
        dim=attention[0].wo.shape[0] if layers else model.config.hidden_size,
        excluded=sequences.excluded,
        seed=config.seed,
        replicates=config.replicates,
        detail_sequences=config.detail_sequences,
        model_name=subject.name,
        statistics=getattr(torch, config.statistics),
        token_text=sequences.token_text,
        deciding=deciding,
    )


def run_probe(
    config: ProbeConfig, out_dir: Path | None, progress: Callable[..., None] | None = None,
    speedups: bool | None = None, stages: Stages | None = None,
) -> ProbeOutcome:
    """Run the chosen hypotheses on ``config.model`` and return the records with timing (see module docstring).

    Args:
        config: the run's settings.
        out_dir: folder for the PNG plots (``None``: no plots).
        progress: called as ``progress(tokens_done, tokens_total)`` after each batch (rank 0), or, when it has a
            parameter named ``stage``, as ``progress(done, total, stage=Stage(...))`` at every stage: loading,
            feeding, analyses (``expattn.probes.progress``).
        speedups: the one switch of the feeding step's speed machinery (``expattn.probes.overlap``: the
            estimators' updates in a worker thread beside the forward pass, and heap trimming; the same numbers);
            ``None``: each part where it helps and is safe.
        stages: with ``config.twin``, where the model's outcome and each twin's records are kept as they finish
            (``probe_subject``).

    Raises:
        ValueError: an empty or unreadable text, bad settings (``load``), or an architecture whose recomputed
            attention does not match its own (``AttentionMismatch``).
    """
    start = time.perf_counter()
    text = load_text(config.corpus, config.text)  # before the weights: a bad text fails at once
    if int(os.environ.get("RANK", "0")) == 0:
        reporter(progress)(Stage("loading", 0, 1))
    subject = load(config)
    return probe_subject(subject, config, out_dir, progress, text=text, start=start, speedups=speedups, release=True,
                         stages=stages)


class Stages(Protocol):
    """Where a run keeps its finished stages as it goes (the model's run, then each twin), so that a run stopped
    between them goes on from the last one (``expattn.commands.probe_stages``)."""

    def keep_model(self, outcome: ProbeOutcome) -> None: ...
    def twin(self, seed: int) -> tuple[list[Record], float] | None: ...  # its records and the seconds it took
    def keep_twin(self, seed: int, records: list[Record], seconds: float) -> None: ...


def probe_subject(subject: Subject, config: ProbeConfig, out_dir: Path | None,
                  progress: Callable[..., None] | None = None, *, text: str | None = None,
                  input_ids: Int[torch.Tensor, "sequence seq_len"] | None = None, start: float | None = None,
                  speedups: bool | None = None, release: bool = False, stages: Stages | None = None,
                  deciding: bool = False) -> ProbeOutcome:
    """Steps 2-4 on a loaded ``subject``: sequences cut from ``text`` (as ``TokenSample`` does) or the rows of
    ``input_ids`` ``(sequence, seq_len)`` (``models.corpus.sequences``); see ``probe``. ``release``: the model is
    the run's own (``run_probe`` loaded it), and its weights go to the ``meta`` device once its records are made,
    before its twins are built (one model's weights beside a twin's probe instead of two). ``stages``: the model's
    outcome (its plots are in ``out_dir`` by then) and each twin's records are kept there as they finish, and a twin
    it already holds is read back, not probed again. ``deciding``: ``ProbeContext.deciding`` (a twin's run)."""
    start = time.perf_counter() if start is None else start
    torch.manual_seed(config.seed)
    fed = sequences(subject, config.seq_len, config.tokens, config.seed, text=text, input_ids=input_ids)
    ctx = context(subject, config, fed, deciding)
    skipped = inapplicable(subject, config.hypotheses)
    built = [cls for cls in ESTIMATORS if cls.claim in config.hypotheses and cls.claim not in skipped]
    twin = ("instead" if release else "beside") if config.twin else None
    groups = passes(subject, ctx, [cls.claim for cls in built], config, twin) if built else [[]]  # [[]]: skipped
    run = _feed(subject, ctx, built, groups, skipped, fed, config, out_dir, progress, speedups)
    info = _model_info(subject, ctx, run.checked)
    _forget_copies(subject, ctx.layers)
    del ctx  # the float32 copies of the model's attention weights go before each twin makes its own
    outcome = ProbeOutcome(
        run.records, fed.count * config.seq_len, fed.count, time.perf_counter() - start, run.forward,
        run.stats_seconds, run.forward_cpu, run.stats_cpu, info, asdict(config),
        run.timings, run.drawn, [list(group) for group in groups],
    )
    if config.twin:  # the same ids through each random-init twin; their records become controls
        if stages is not None:
            stages.keep_model(outcome)
        device = subject.device
        if release:
            release_weights(subject, config)
        outcome.records, _ = with_twins(subject, config, fed, outcome.records, run.rank, speedups, device, stages)
        outcome.seconds = time.perf_counter() - start
    return outcome


def with_twins(subject: Subject, config: ProbeConfig, fed: Sequences, records: list[Record], rank: int,
               speedups: bool | None, device: torch.device, stages: Stages | None = None,
               ) -> tuple[list[Record], float]:
    """``records`` (the model's) with the verdicts of its ``config.twin_inits`` random-init twins attached
    (``results.twin.attach_twin``, on rank 0), each twin probed on ``fed`` one at a time, on the heap the last run
    gave back, unless ``stages`` holds its records; and the seconds the twins read back from ``stages`` took."""
    seeds = [config.seed + i for i in range(config.twin_inits)]
    twins, before = [], 0.0
    for seed in seeds:
        kept = None if stages is None else stages.twin(seed)
        if kept is None:
            release_heap()
            start = time.perf_counter()
            kept = twin_records(subject, config, fed, seed, speedups, device=device), 0.0
            if stages is not None:
                stages.keep_twin(seed, kept[0], time.perf_counter() - start)
        twins.append(kept[0])
        before += kept[1]
    return (attach_twin(records, twins, headlines(), seeds) if rank == 0 else records), before


def _forget_copies(subject: Subject, layers: int) -> None:
    """Drop the copies of ``subject``'s attention modules in other dtypes that the run's replays made (float32 for a
    half-precision model, float64 for E5 and E7: 1.8 GiB for the bfloat16 Qwen2.5 1.5B), which would otherwise stay
    with the model's reading while its twins run."""
    for i in range(layers):
        qkv = subject.adapter.attention(subject.model, i).qkv
        if isinstance(qkv, Replay):
            qkv.forget()


def release_weights(subject: Subject, config: ProbeConfig) -> None:
    """``subject``'s weights to the ``meta`` device (their memory goes back; its class and config stay for its
    twins), unless a device map spreads them (accelerate's hooks hold their own placement)."""
    if config.device_map is None:
        subject.model.to("meta")


def twin_records(subject: Subject, config: ProbeConfig, fed: Sequences, seed: int, speedups: bool | None = None,
                 progress: Callable[..., None] | None = None, device: torch.device | None = None) -> list[Record]:
    """The records of ``subject``'s random-init twin of initialisation ``seed`` (``models.twin.probe_twin``, built
    on ``device`` [the model's]) on the token ids ``fed`` gave the model, measured as ``config`` says, without plots
    (``progress`` as ``probe`` takes it), measuring only what decides each verdict and its headline
    (``ProbeContext.deciding``: all a twin control reads)."""
    alone = replace(config, twin=False)
    return probe_twin(subject, lambda twin, ids: probe_subject(twin, alone, None, progress, input_ids=ids,
                                                               speedups=speedups, deciding=True).records,
                      seed=seed, fed=fed, hypotheses=config.hypotheses, device=device)


@dataclass
class _Run:
    """What the passes of one run gathered on this rank: the records, each measured hypothesis's timings, the
    figures' numbers, the wall and CPU seconds of the forward passes and of the statistics, and the acceptance
    check's largest error."""

    rank: int
    records: list[Record] = field(default_factory=list)
    timings: dict[str, dict[str, float]] = field(default_factory=dict)
    drawn: dict[str, Drawing] = field(default_factory=dict)
    forward: float = 0.0
    stats_seconds: float = 0.0
    forward_cpu: float = 0.0
    stats_cpu: float = 0.0
    checked: float = 0.0


def _feed(subject: Subject, ctx: ProbeContext, built: list, groups: list, skipped: dict[str, str], fed: Sequences,
          config: ProbeConfig, out_dir: Path | None, progress: Callable[..., None] | None,
          speedups: bool | None) -> _Run:
    """Steps 2-4 once per group of ``groups`` over the same sequences: build its estimators, feed, merge, and turn
    them into records (the ``skipped`` ones with the first group)."""
    rank, world = _distributed()
    n_seq = fed.count
    batches = [list(range(b, min(b + config.batch_size, n_seq))) for b in range(0, n_seq, config.batch_size)]
    mine = batches[rank::world]  # whole batches per process: the same forward passes as one process
    report = reporter(progress if rank == 0 else None)
    run = _Run(rank)
    for number, group in enumerate(groups, start=1):
        if len(groups) > 1 and rank == 0:
            print(f"pass {number} of {len(groups)} over the same {n_seq * config.seq_len:,} tokens: "
                  f"{', '.join(group)} (all {len(groups)} passes: the memory holds not all at once)", file=sys.stderr)
        estimators = [cls(ctx) for cls in built if cls.claim in group]
        report(Stage("feeding", 0, config.tokens, group))
        done = feed(subject, ctx, estimators, mine, fed.item, config,
                    lambda d, total, ids=group: report(Stage("feeding", d, total, ids)), rank, world, speedups)
        seconds, stats = merge(estimators, done, rank, world)
        run.forward += seconds if done.overlapped else seconds - stats
        run.stats_seconds += stats
        run.forward_cpu += done.forward_cpu - done.stats_cpu
        run.stats_cpu += done.stats_cpu
        run.checked = max(run.checked, done.checked)
        if done.overlapped:  # records measures them all first, two at a time (measure_in_parallel)
            report(Stage("analyses", 0, len(estimators), group))
        recs, analysis, measured = records(estimators, skipped if number == 1 else {}, done.failed, subject.name,
                                           out_dir, report, done.overlapped) if rank == 0 else ([], {}, {})
        run.records += recs
        run.timings |= {claim: {"update_seconds": done.per_estimator[claim], "result_seconds": seconds}
                        for claim, seconds in analysis.items()}
        run.drawn |= drawings(estimators, measured) if rank == 0 else {}
        report(Stage("analyses", len(estimators), len(estimators)))
        ctx.analyses.clear()  # the group's shared read-outs and statistics go before the next group's
        del estimators, done
        if number < len(groups):  # and the heap they leave: the next pass's peak would sit on top of it
            release_heap()
    order = hypotheses()
    run.records.sort(key=lambda r: order.index(r.id))
    return run


def _model_info(subject: Subject, ctx: ProbeContext, checked: float) -> dict:
    """The ``model`` object of ``results.json``: what was probed, its shape and where it ran."""
    w = ctx.attention[0]
    return {
        "name": subject.name,
        "path": None if subject.path is None else str(subject.path),
        "model_type": subject.model_type,
        "family": subject.adapter.family,
        "layers": ctx.layers,
        "dim": ctx.dim,
        "heads": w.heads,
        "kv_heads": w.kv_heads,
        "norm_position": subject.adapter.norm_position,
        "dtype": str(subject.dtype).removeprefix("torch."),
        "device": str(subject.device),
        "attention_check_max_error": checked,
    }


SAY_PEAK_FROM = 2 * memory.GIB


def _say_estimate(need: Footprint, subject: Subject, twin: str | None = None,
                  groups: list[tuple[str, ...]] | None = None) -> int | None:
    """One line on stderr before feeding, once the run is planned: the peak it will reach, what the process holds now
    (the model and the interpreter) plus the footprint's peak beside it (measured peaks: benchmarks/RESULTS.md); in
    passes (``groups``, more than one), the largest pass's peak, and what all at once would need; plus,
    with ``twin="beside"``, one random-init twin's weights (a twin is built and probed while the model is held, one
    at a time, with the heap released between runs: ``release_heap``); with ``twin="instead"`` each twin takes the
    place of the model's released weights (``probe_subject(release=True)``) and adds nothing.
    Only where the model's weights and the probe's footprint together reach ``SAY_PEAK_FROM``: a smaller run is no
    risk to any machine the probe runs on, its one-line messages stay one line, and whether the line appears depends
    on the model and the settings, not on what else the process has held before (a notebook, a test session).
    Returns the peak said, or None."""
    held = memory.held_bytes(subject.device)
    weights = sum(t.numel() * t.element_size() for t in (*subject.model.parameters(), *subject.model.buffers()))
    if held is None or weights + need.peak() < SAY_PEAK_FROM or int(os.environ.get("RANK", "0")) != 0:
        return None
    twins = weights if twin == "beside" else 0
    split = groups is not None and len(groups) > 1
    probe = max(need.peak(g) for g in groups) if split else need.peak()
    print(f"memory: estimated peak {memory.readable(held + twins + probe)} on {subject.device.type} "
          f"({memory.readable(held)} held now, model included, + {memory.readable(probe)} for the probe"
          + (f" in its largest of {len(groups)} passes, {memory.readable(need.peak())} all at once" if split else "")
          + (f", + {memory.readable(twins)} for a random-init twin" if twin == "beside" else "")
          + (", each random-init twin in the model's place" if twin == "instead" else "")
          + f"; largest: {', '.join(need.largest())})", file=sys.stderr)
    return held + twins + probe


def passes(subject: Subject, ctx: ProbeContext, chosen: list[str], config: ProbeConfig,
           twin: str | None = None) -> list[tuple[str, ...]]:
    """The groups of ``chosen`` hypotheses fed in one pass each (``expattn.probes.passes.plan``: one group when
    all fit); under ``torchrun`` every process takes the plan with the most passes, so all feed the same groups.
    ``twin``: where the twins will run, as ``_say_estimate`` takes it."""
    if ctx.layers == 0 or not chosen:
        return [tuple(chosen)] if chosen else []
    need = run_footprint(ctx, chosen, config, subject.dtype)
    memory.read_in((*subject.model.parameters(), *subject.model.buffers()))  # before the free memory is read
    groups = plan(need, subject.device, config.tokens, config.memory_budget,
                  f"probing {ctx.layers} layers of width {ctx.dim} for {', '.join(chosen)}")
    peak = _say_estimate(need, subject, twin, groups)
    if peak is not None and subject.device.type == "cpu":
        map_when_tight(peak)  # the resident size by its estimate where the memory is tight
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _distributed()
        every: list = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, groups)
        groups = max(every, key=len)
    return groups
