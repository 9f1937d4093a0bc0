"""``expattn probe``: measure hypotheses E1-E8 on a real pretrained transformer and real text.

The model is a HuggingFace model directory (BERT, GPT-2, Llama families) or a folder written by
``expattn train`` (expattn's own LM). ``ProbeConfig.hypotheses`` chooses which estimators are
built and fed; a chosen hypothesis that cannot apply to the model (the adapter's
``inapplicable``, e.g. E5 on a non-softmax carrier) gets a ``skipped`` record with the reason.

One pass over a deterministic token sample: the model runs batch by batch with forward hooks
(``expattn.probes.adapters.Capture``); after each block the estimators of E1-E8 update their
streaming statistics from that block's tensors and the tensors are dropped. Under ``torchrun``
(gloo on CPU, NCCL on GPU) every process takes the batches ``rank, rank + world, ...`` and the
fitted statistics are merged on rank 0, which computes the records and draws the plots.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import expattn.probes.lm_adapter  # noqa: F401  (registers the adapter of expattn's own LMs)
from expattn.catalogue import entry
from expattn.memory import probe_bytes, require
from expattn.probes.adapters import Capture, adapter_for
from expattn.probes.common import Batch, ProbeContext
from expattn.probes.corpus import TokenSample, excluded_positions, load_text, sequence
from expattn.probes.e1_expansion import E1Expansion
from expattn.probes.e2_normalization import E2Normalization
from expattn.probes.e3_gaussianity import E3Gaussianity
from expattn.probes.e4_alignment import E4Alignment
from expattn.probes.e5_gradient import E5Gradient
from expattn.probes.e6_mlp import E6Mlp
from expattn.probes.e7_collapse import E7Collapse
from expattn.probes.e8_heads import E8Heads
from expattn.probes.loading import load_pretrained, read_config, resolve_model_dir
from expattn.probes.stats import poisson_weights
from expattn.results.record import Record, enforce_controls
from expattn.seeds import check_seed

ESTIMATORS = (E1Expansion, E2Normalization, E3Gaussianity, E4Alignment, E5Gradient, E6Mlp, E7Collapse, E8Heads)
HYPOTHESES = tuple(cls.claim for cls in ESTIMATORS)

TRIM_SLACK = 0.10  # relative growth of the resident size that triggers a heap trim (see _heap_trimmer)
DEFAULT_TOKENS = {"minilm": 20_000, "smollm2": 8_192}
QUICK_TOKENS = {"minilm": 2_048, "smollm2": 768}


@dataclass(frozen=True)
class ProbeConfig:
    """What to probe and how much.

    Attributes:
        model: ``minilm``, ``smollm2``, a local HuggingFace model directory or a folder written by
            ``expattn train`` (its ``model/`` subfolder).
        corpus: built-in corpus name (``shakespeare``); ignored when ``text`` is given.
        text: path of a UTF-8 text file (or a folder of ``*.txt`` files) to use instead of the corpus.
        tokens: number of tokens to read (rounded up to whole sequences).
        seq_len: tokens per sequence, special tokens included.
        seed: seed of the sample, the bootstrap and every random baseline.
        batch_size: sequences per forward pass.
        replicates: Poisson bootstrap replicates.
        detail_sequences: sequences used by the per-sequence analyses (E4 Fisher, E5, E7).
        hypotheses: the hypotheses to measure (ids among ``HYPOTHESES``); the others are not computed.
    """

    model: str = "minilm"
    corpus: str = "shakespeare"
    text: str | None = None
    tokens: int = 20_000
    seq_len: int = 128
    seed: int = 0
    batch_size: int = 16
    replicates: int = 200
    detail_sequences: int = 4
    hypotheses: tuple[str, ...] = HYPOTHESES

    @classmethod
    def preset(cls, model: str, quick: bool = False, seed: int = 0) -> ProbeConfig:
        """The default size for ``model`` (about 3 min on 2 CPU cores; ``quick``: under 40 s)."""
        table = QUICK_TOKENS if quick else DEFAULT_TOKENS
        return cls(
            model=model,
            tokens=table.get(model, 4_096 if quick else 20_000),
            seed=seed,
            detail_sequences=2 if quick else 4,
            replicates=100 if quick else 200,
        )

    def validate(self) -> None:
        """ValueError naming the first bad field."""
        for name, low in (("tokens", 1), ("seq_len", 4), ("batch_size", 1), ("replicates", 2), ("detail_sequences", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        check_seed(self.seed)
        require(probe_bytes(self.tokens), "cpu", f"probing {self.tokens:,} tokens")
        chosen = self.hypotheses
        if not isinstance(chosen, tuple | list) or not chosen or not all(isinstance(h, str) for h in chosen):
            raise ValueError(f"hypotheses must be a non-empty sequence of ids among {HYPOTHESES}, got {chosen!r}")
        unknown = [h for h in chosen if h not in HYPOTHESES]
        if unknown:
            raise ValueError(f"unknown hypothesis {unknown[0]!r}; choose among {', '.join(HYPOTHESES)}")
        if len(set(chosen)) != len(chosen):
            raise ValueError(f"hypotheses must not repeat an id, got {', '.join(chosen)}")


@dataclass
class ProbeOutcome:
    """Records plus the run's provenance (what ``results.json`` stores beside them) and, on rank 0,
    the fitted (merged) estimators with their streaming statistics."""

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
    estimators: list = field(default_factory=list)


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


def _batch(indices: list[int], config: ProbeConfig) -> Batch:
    index = torch.tensor(indices)
    return Batch(index=index, weights=poisson_weights(config.seed, index, config.replicates))


def probe(
    config: ProbeConfig, out_dir: Path | None, progress: Callable[[int, int], None] | None = None
) -> ProbeOutcome:
    """Run the chosen hypotheses on ``config.model`` and return the records with timing (see module docstring).

    Args:
        config: the run's settings.
        out_dir: folder for the PNG plots (``None``: no plots).
        progress: called as ``progress(tokens_done, tokens_total)`` after each batch (rank 0).

    Raises:
        ValueError: bad settings, unknown model, a directory that is not a supported model, an
            empty or unreadable text, or a sequence length beyond the model's context.
    """
    start = time.perf_counter()
    config.validate()
    path = resolve_model_dir(config.model)
    hf_config = read_config(path)
    adapter = adapter_for(hf_config["model_type"])
    context = _context_length(hf_config)
    if context is not None and config.seq_len > context:
        raise ValueError(f"seq_len {config.seq_len} exceeds the context length {context} of {config.model}")
    text = load_text(config.corpus, config.text)
    model, tokenizer = load_pretrained(path, hf_config["model_type"])
    torch.manual_seed(config.seed)
    layers = len(adapter.blocks(model))
    excluded = excluded_positions(config.seq_len, adapter.family, tokenizer)
    ctx = ProbeContext(
        model=model,
        adapter=adapter,
        attention=tuple(adapter.attention(model, i) for i in range(layers)),
        layers=layers,
        dim=model.config.hidden_size,
        excluded=excluded,
        seed=config.seed,
        replicates=config.replicates,
        detail_sequences=config.detail_sequences,
        model_name=config.model,
    )
    inapplicable = {h: why for h, why in adapter.inapplicable(model).items() if h in config.hypotheses}
    estimators = [cls(ctx) for cls in ESTIMATORS if cls.claim in config.hypotheses and cls.claim not in inapplicable]
    sample = TokenSample(config.seq_len, config.seed)
    n_seq = math.ceil(config.tokens / config.seq_len)
    rank, world = _distributed()
    batches = [list(range(b, min(b + config.batch_size, n_seq))) for b in range(0, n_seq, config.batch_size)]
    mine = batches[rank::world]  # whole batches per process: the same forward passes as one process
    state: dict = {"batch": None, "stats_cpu": 0.0}
    per_estimator = dict.fromkeys((est.claim for est in estimators), 0.0)

    def on_block(i: int, tensors: dict[str, torch.Tensor]) -> None:
        c0 = time.process_time()
        state["batch"].shared.clear()  # statistics shared between estimators live for one block
        for est in estimators:
            t0 = time.perf_counter()
            est.update(i, tensors, state["batch"])
            per_estimator[est.claim] += time.perf_counter() - t0
        state["stats_cpu"] += time.process_time() - c0

    forward = forward_cpu = 0.0
    trim = _heap_trimmer()
    with torch.no_grad(), Capture(model, adapter, on_block):
        for done, indices in enumerate(mine if estimators else [], start=1):
            ids = [sequence(text, tokenizer, adapter.family, sample, i) for i in indices]
            state["batch"] = _batch(indices, config)
            t0, c0 = time.perf_counter(), time.process_time()
            model(input_ids=torch.stack(ids), attention_mask=torch.ones(len(ids), config.seq_len, dtype=torch.long))
            forward += time.perf_counter() - t0
            forward_cpu += time.process_time() - c0
            if trim is not None:
                trim()
            if progress is not None and rank == 0:
                progress(min(config.tokens, done * world * config.batch_size * config.seq_len), config.tokens)
    stats_seconds = sum(per_estimator.values())
    if world > 1:
        gathered: list = [None] * world
        torch.distributed.all_gather_object(gathered, [estimators, forward, stats_seconds])
        if rank == 0:
            for other, *_ in gathered[1:]:
                for est, theirs in zip(estimators, other, strict=True):
                    est.merge(theirs)
        forward = max(g[1] for g in gathered)
        stats_seconds = max(g[2] for g in gathered)
    records = []
    if rank == 0 and out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    if rank == 0:
        for est in estimators:
            t0 = time.perf_counter()
            try:
                with torch.no_grad():
                    record = est.result(out_dir)
            except OSError:  # writing its plot failed (a full disk...): an error of the run, not a verdict
                raise
            except Exception as err:  # one failing analysis must not discard the others: report it
                record = Record(
                    id=est.claim,
                    kind="empirical",
                    verdict="skipped",
                    notes=f"analysis raised {type(err).__name__}: {err}",
                    details={"traceback": traceback.format_exc(limit=5)},
                )
            record.metrics["update_seconds"] = per_estimator[est.claim]
            record.metrics["result_seconds"] = time.perf_counter() - t0
            record.statement, record.source = entry(record.id).statement, entry(record.id).seeds
            record.details["model"] = config.model
            records.append(enforce_controls(record))
        for claim, why in inapplicable.items():
            records.append(Record(claim, "empirical", "skipped", notes=f"does not apply to this model: {why}",
                                  statement=entry(claim).statement, source=entry(claim).seeds,
                                  details={"model": config.model}))
        records.sort(key=lambda r: HYPOTHESES.index(r.id))
    model_info = {
        "name": config.model,
        "path": str(path),
        "model_type": hf_config["model_type"],
        "family": adapter.family,
        "layers": layers,
        "dim": ctx.dim,
        "heads": ctx.attention[0].heads,
        "kv_heads": ctx.attention[0].kv_heads,
        "norm_position": adapter.norm_position,
    }
    return ProbeOutcome(
        records,
        n_seq * config.seq_len,
        n_seq,
        time.perf_counter() - start,
        forward - stats_seconds,
        stats_seconds,
        forward_cpu - state["stats_cpu"],
        state["stats_cpu"],
        model_info,
        asdict(config),
        estimators if rank == 0 else [],
    )


def run_probe(
    config: ProbeConfig, out_dir: Path | None, progress: Callable[[int, int], None] | None = None
) -> list[Record]:
    """Records of E1-E8 for ``config`` (plots written into ``out_dir``); see ``probe`` for the details."""
    return probe(config, out_dir, progress).records
