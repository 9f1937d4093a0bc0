"""``expattn probe``: measure the hypotheses of ``hypotheses.ESTIMATORS`` on a pretrained transformer and real text.

The model is a HuggingFace model directory (BERT, GPT-2, Llama families) or a folder written by
``expattn train`` (expattn's own LM). ``ProbeConfig.hypotheses`` chooses which estimators are
built and fed; a chosen hypothesis that cannot apply to the model (the adapter's
``inapplicable``, e.g. E5 on a non-softmax carrier) gets a ``skipped`` record with the reason; one whose
update or analysis raises gets an ``error`` record (the exception and its traceback), and the others are
still measured.

One pass over a deterministic token sample: the model runs batch by batch with forward hooks
(``expattn.probes.models.adapters.Capture``); after each block the estimators update their
streaming statistics from that block's tensors and the tensors are dropped. Under ``torchrun``
(gloo on CPU, NCCL on GPU) every process takes the batches ``rank, rank + world, ...`` and the
fitted statistics are merged on rank 0, which computes the records and draws the plots.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
from jaxtyping import Int

from expattn.arguments import integer
from expattn.catalogue import headlines
from expattn.memory import probe_bytes, require
from expattn.probes.analyses import records
from expattn.probes.budgets import default_tokens
from expattn.probes.drawings import Drawing, drawings
from expattn.probes.feeding import feed, merge
from expattn.probes.footprint import STATISTICS
from expattn.probes.hypotheses import ESTIMATORS, HYPOTHESES
from expattn.probes.hypotheses.base import ProbeContext
from expattn.probes.models.corpus import TokenSample, excluded_positions, load_text, sequence
from expattn.probes.models.loading import load_pretrained, read_config, resolve_model_dir
from expattn.probes.models.subject import Subject, parse_device, parse_dtype, place, subject_from_model, synthetic_image
from expattn.probes.models.twin import probe_twin
from expattn.probes.passes import budget_bytes, plan, run_footprint
from expattn.probes.progress import Stage, reporter
from expattn.results.record import Record, results_document
from expattn.results.twin import attach_twin
from expattn.seeds import check_seed


@dataclass(frozen=True)
class ProbeConfig:
    """What to probe and how much.

    Attributes:
        model: ``minilm``, ``smollm2``, a local HuggingFace model directory or a folder written by
            ``expattn train`` (its ``model/`` subfolder).
        corpus: built-in corpus name (``shakespeare``); ignored when ``text`` is given.
        text: path of a UTF-8 text file (or a folder of ``*.txt`` files) to use instead of the corpus.
        tokens: number of tokens to read (rounded up to whole sequences); None: ``default_tokens(model)``.
        seq_len: tokens per sequence, special tokens included.
        seed: seed of the sample, the bootstrap and every random baseline.
        batch_size: sequences per forward pass.
        replicates: Poisson bootstrap replicates.
        detail_sequences: sequences used by the per-sequence analyses (E4 Fisher, E5, E7).
        hypotheses: the hypotheses to measure (ids among ``HYPOTHESES``); the others are not computed.
        device: ``cpu``, ``cuda`` or ``cuda:N`` (None: cpu, or this rank's GPU under torchrun).
        dtype: ``float32``, ``bfloat16`` or ``float16`` of the model (None: float32); the statistics read
            float32 copies of its tensors.
        device_map: ``auto`` to spread the model over the available devices (accelerate), or None.
        tokenizer: folder of the tokenizer when the model folder has none.
        statistics: ``float64`` or ``float32``, the dtype of the ``(D, D)`` accumulators of E3, E4 and E6
            (float32 halves them: ``expattn.probes.footprint`` gives the bytes; the read-outs stay float64).
        memory_budget: bytes the probe may take beside the model's weights (an int, or a size such as ``"40GiB"``;
            stored as bytes); None: the device's free memory. Hypotheses that do not fit together are fed in
            several passes over the same tokens (``expattn.probes.passes``).
        twin: also probe the model's random-init twin on the same ids (``probes.models.twin``), each record
            carrying its verdict as a control and a ``training`` classification (``results.twin``).
    """

    model: str = "minilm"
    corpus: str = "shakespeare"
    text: str | None = None
    tokens: int | None = None
    seq_len: int = 128
    seed: int = 0
    batch_size: int = 16
    replicates: int = 200
    detail_sequences: int = 32
    hypotheses: tuple[str, ...] = HYPOTHESES
    device: str | None = None
    dtype: str | None = None
    device_map: str | None = None
    tokenizer: str | None = None
    statistics: str = "float64"
    memory_budget: int | str | None = None
    twin: bool = False

    @classmethod
    def preset(cls, model: str, quick: bool = False, seed: int = 0, twin: bool = False) -> ProbeConfig:
        """The default size for ``model`` (about 3 min on 2 CPU cores; ``quick``: under 40 s)."""
        return cls(
            model=model, twin=twin,
            tokens=default_tokens(model, quick),
            seed=seed,
            detail_sequences=8 if quick else 32,
            replicates=100 if quick else 200,
        )

    def __post_init__(self) -> None:
        """ValueError naming the first bad field; ``tokens`` None becomes the model's default."""
        if self.tokens is None:
            object.__setattr__(self, "tokens", default_tokens(self.model))
        for name, low in (("tokens", 1), ("seq_len", 4), ("batch_size", 1), ("replicates", 2), ("detail_sequences", 1)):
            integer(name, getattr(self, name), at_least=low)
        check_seed(self.seed)
        if not isinstance(self.twin, bool):
            raise TypeError(f"twin must be True or False, got {self.twin!r}")
        if self.device_map is not None and self.device is not None:
            raise ValueError(f"give device or device_map, not both (got device {self.device!r} and device_map "
                             f"{self.device_map!r}: device_map places the model itself)")
        if self.statistics not in STATISTICS:
            raise ValueError(f"statistics must be one of {', '.join(STATISTICS)}, got {self.statistics!r}")
        object.__setattr__(self, "memory_budget", budget_bytes(self.memory_budget))
        chosen = self.hypotheses
        if not isinstance(chosen, tuple | list) or not chosen or not all(isinstance(h, str) for h in chosen):
            raise ValueError(f"hypotheses must be a non-empty sequence of ids among {HYPOTHESES}, got {chosen!r}")
        unknown = [h for h in chosen if h not in HYPOTHESES]
        if unknown:
            raise ValueError(f"unknown hypothesis {unknown[0]!r}; choose among {', '.join(HYPOTHESES)}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"hypotheses must not repeat an id, got {', '.join(chosen)}")

    def require_memory(self) -> None:
        """ValueError unless the host's free memory holds the token sample (``memory.probe_bytes``): a check of
        the machine, not of the settings, so it runs when the work starts rather than at construction."""
        require(probe_bytes(self.tokens), "cpu", f"probing {self.tokens:,} tokens")


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


def _context_length(config: dict) -> int | None:
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        if isinstance(config.get(key), int):
            return config[key]
    return None


def _distributed() -> tuple[int, int]:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        torch.distributed.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    if world > 1:
        return torch.distributed.get_rank(), world
    return 0, 1


def load(config: ProbeConfig) -> Subject:
    """Step 1: the model named by ``config`` with its tokenizer and adapter, on ``config.device`` in
    ``config.dtype`` (ValueError: unknown model, unreadable folder or architecture, no tokenizer)."""
    path = resolve_model_dir(config.model)
    hf_config = read_config(path)
    device, dtype = parse_device(config.device), parse_dtype(config.dtype)
    if config.device_map is not None and config.device_map != "auto":
        raise ValueError(f"device_map must be 'auto' (or None), got {config.device_map!r}")
    tokenizer_dir = None if config.tokenizer is None else Path(config.tokenizer)
    if tokenizer_dir is not None and not tokenizer_dir.is_dir():
        raise ValueError(f"tokenizer {config.tokenizer!r} is not a folder")
    model, tokenizer = load_pretrained(path, hf_config["model_type"], dtype, config.device_map, tokenizer_dir)
    if config.device_map is None:
        model = place(model, device, None)
    subject = subject_from_model(model, tokenizer, name=config.model)
    subject.path, subject.model_type, subject.config = path, hf_config["model_type"], hf_config
    return subject


def context(subject: Subject, config: ProbeConfig) -> ProbeContext:
    """The fixed choices of a run on ``subject`` (attention weights in float32 when the model is not)."""
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
        excluded=excluded_positions(config.seq_len, adapter.family, subject.tokenizer),
        seed=config.seed,
        replicates=config.replicates,
        detail_sequences=config.detail_sequences,
        model_name=subject.name,
        statistics=getattr(torch, config.statistics),
    )


def probe(
    config: ProbeConfig, out_dir: Path | None, progress: Callable[..., None] | None = None,
    speedups: bool | None = None,
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

    Raises:
        ValueError: bad settings, unknown model, a directory that is not a supported model, an
            empty or unreadable text, a sequence length beyond the model's context, or an architecture
            whose recomputed attention does not match its own (``AttentionMismatch``).
    """
    start = time.perf_counter()
    config.require_memory()
    if config.device_map is None:
        parse_device(config.device)
    parse_dtype(config.dtype)
    path = resolve_model_dir(config.model)
    context_length = _context_length(read_config(path))
    if context_length is not None and config.seq_len > context_length:
        raise ValueError(f"seq_len {config.seq_len} exceeds the context length {context_length} of {config.model}")
    text = load_text(config.corpus, config.text)
    if int(os.environ.get("RANK", "0")) == 0:
        reporter(progress)(Stage("loading", 0, 1))
    return probe_subject(load(config), config, out_dir, progress, text=text, start=start, speedups=speedups)


def probe_subject(subject: Subject, config: ProbeConfig, out_dir: Path | None,
                  progress: Callable[..., None] | None = None, *, text: str | None = None,
                  input_ids: Int[torch.Tensor, "sequence seq_len"] | None = None, start: float | None = None,
                  speedups: bool | None = None) -> ProbeOutcome:
    """Steps 2-4 on a loaded ``subject``: sequences cut from ``text`` (as ``TokenSample`` does) or the rows of
    ``input_ids`` ``(sequence, seq_len)``; see ``probe``."""
    start = time.perf_counter() if start is None else start
    torch.manual_seed(config.seed)
    ctx = context(subject, config)
    adapter = subject.adapter
    inapplicable = dict(adapter.inapplicable(subject.model))  # what the model reading cannot offer
    offered = adapter.offered(subject.model)
    for cls in ESTIMATORS:  # then what each hypothesis asks of the model: its tensors, then its own check
        if cls.claim in inapplicable or cls.claim not in config.hypotheses:
            continue
        missing = [name for name in cls.tensors if name not in offered]
        why = f"the model reading hands over no {', '.join(missing)}" if missing else cls.inapplicable(subject)
        if why is not None:
            inapplicable[cls.claim] = why
    inapplicable = {h: why for h, why in inapplicable.items() if h in config.hypotheses}
    built = [cls for cls in ESTIMATORS if cls.claim in config.hypotheses and cls.claim not in inapplicable]
    groups = passes(subject, ctx, [cls.claim for cls in built], config) if built else [[]]  # [[]]: skipped ones
    if subject.image is not None:
        if config.seq_len != subject.image_tokens:
            raise ValueError(f"seq_len must be {subject.image_tokens} for this vision model (its patches and [CLS])")
        n_seq = math.ceil(config.tokens / config.seq_len)

        def inputs(i: int) -> torch.Tensor:
            return synthetic_image(subject.image, config.seed, i)
    elif input_ids is not None:
        n_seq = len(input_ids)

        def inputs(i: int) -> torch.Tensor:
            return input_ids[i]
    else:
        sample = TokenSample(config.seq_len, config.seed)
        n_seq = math.ceil(config.tokens / config.seq_len)

        def inputs(i: int) -> torch.Tensor:
            return sequence(text, subject.tokenizer, adapter.family, sample, i)
    if subject.image is None and subject.tokenizer is not None:

        def token_text(i: int, position: int) -> str:
            return subject.tokenizer.decode([int(inputs(i)[position])])

        ctx = replace(ctx, token_text=token_text)
    rank, world = _distributed()
    batches = [list(range(b, min(b + config.batch_size, n_seq))) for b in range(0, n_seq, config.batch_size)]
    mine = batches[rank::world]  # whole batches per process: the same forward passes as one process
    report = reporter(progress if rank == 0 else None)
    recs, timings, drawn, forward, stats_seconds, checked = [], {}, {}, 0.0, 0.0, 0.0
    forward_cpu = stats_cpu = 0.0
    for number, group in enumerate(groups, start=1):
        if len(groups) > 1 and rank == 0:
            print(f"pass {number} of {len(groups)} over the same {n_seq * config.seq_len:,} tokens: "
                  f"{', '.join(group)} (all {len(groups)} passes: the memory holds not all at once)", file=sys.stderr)
        estimators = [cls(ctx) for cls in built if cls.claim in group]
        report(Stage("feeding", 0, config.tokens, group))
        fed = feed(subject, ctx, estimators, mine, inputs, config,
                   lambda done, total, ids=group: report(Stage("feeding", done, total, ids)), rank, world, speedups)
        seconds, stats = merge(estimators, fed, rank, world)
        forward, stats_seconds = forward + (seconds if fed.overlapped else seconds - stats), stats_seconds + stats
        forward_cpu, stats_cpu = forward_cpu + fed.forward_cpu - fed.stats_cpu, stats_cpu + fed.stats_cpu
        checked = max(checked, fed.checked)
        if fed.overlapped:  # records measures them all first, two at a time (measure_in_parallel)
            report(Stage("analyses", 0, len(estimators), group))
        done, analysis, measured = records(estimators, inapplicable if number == 1 else {}, fed.failed, subject.name,
                                           out_dir, report, fed.overlapped) if rank == 0 else ([], {}, {})
        recs += done
        timings |= {claim: {"update_seconds": fed.per_estimator[claim], "result_seconds": seconds}
                    for claim, seconds in analysis.items()}
        drawn |= drawings(estimators, measured) if rank == 0 else {}
        report(Stage("analyses", len(estimators), len(estimators)))
        ctx.analyses.clear()  # the group's shared read-outs and statistics go before the next group's
        del estimators, fed
    recs.sort(key=lambda r: HYPOTHESES.index(r.id))
    if config.twin:  # the same ids through the random-init twin; its records become controls
        alone = replace(config, twin=False)
        twins = probe_twin(subject, lambda twin, ids: probe_subject(twin, alone, None, input_ids=ids, speedups=speedups)
                           .records, seed=config.seed, text=text, input_ids=input_ids, seq_len=config.seq_len,
                           tokens=config.tokens, hypotheses=config.hypotheses)
        recs = attach_twin(recs, twins, headlines(), config.seed) if rank == 0 else recs
    w = ctx.attention[0]
    model_info = {
        "name": subject.name,
        "path": None if subject.path is None else str(subject.path),
        "model_type": subject.model_type,
        "family": adapter.family,
        "layers": ctx.layers,
        "dim": ctx.dim,
        "heads": w.heads,
        "kv_heads": w.kv_heads,
        "norm_position": adapter.norm_position,
        "dtype": str(subject.dtype).removeprefix("torch."),
        "device": str(subject.device),
        "attention_check_max_error": checked,
    }
    return ProbeOutcome(
        recs,
        n_seq * config.seq_len,
        n_seq,
        time.perf_counter() - start,
        forward,
        stats_seconds,
        forward_cpu,
        stats_cpu,
        model_info,
        asdict(config),
        timings,
        drawn,
        [list(group) for group in groups],
    )


def passes(subject: Subject, ctx: ProbeContext, chosen: list[str], config: ProbeConfig) -> list[tuple[str, ...]]:
    """The groups of ``chosen`` hypotheses fed in one pass each (``expattn.probes.passes.plan``: one group when
    all fit); under ``torchrun`` every process takes the plan with the most passes, so all feed the same groups."""
    if ctx.layers == 0 or not chosen:
        return [tuple(chosen)] if chosen else []
    need = run_footprint(ctx, chosen, config, subject.dtype)
    groups = plan(need, subject.device, config.tokens, config.memory_budget,
                  f"probing {ctx.layers} layers of width {ctx.dim} for {', '.join(chosen)}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        _distributed()
        every: list = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(every, groups)
        groups = max(every, key=len)
    return groups
