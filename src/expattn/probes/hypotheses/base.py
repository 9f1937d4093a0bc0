"""What every hypothesis estimator receives, and the helpers they share (verdicts, plots).

An estimator follows the scikit-learn habit: configured in the constructor from a
``ProbeContext``, fed block by block with ``update(i, tensors, batch)`` while the model runs,
combined across processes with ``merge(other)`` and turned into a ``Record`` by ``result(out_dir)``,
which composes three steps each estimator defines: ``measure()`` (the numbers, no rule),
``judge(measured)`` (the stated rule applied to them and to the controls) and
``draw(measured, out_dir)`` (the figure, from the same numbers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from expattn.probes.models.adapters import Adapter
from expattn.probes.models.attention import AttnWeights
from expattn.probes.sizes import Sizes
from expattn.results.plotting import plain_label, pyplot, save_figure
from expattn.results.record import Control, Record

if TYPE_CHECKING:
    from expattn.probes.models.subject import Subject


@dataclass(frozen=True)
class ProbeContext:
    """The model under study and the fixed choices of a run.

    Attributes:
        model: the backbone in eval mode.
        adapter: its family adapter.
        attention: per block, the self-attention weights.
        layers: number of blocks; dim: model width D.
        excluded: ``(token,)`` True at the first token and special tokens.
        seed: seed of every random choice; replicates: bootstrap replicates.
        detail_sequences: sequences (lowest indices) used by the costly per-sequence analyses (E4 Fisher, E5, E7).
        model_name: for titles.
        statistics: dtype of the ``(D, D)`` accumulators of E3, E4 and E6 (``torch.float32``: half the memory).
        token_text: ``(sequence index, position) ->`` the decoded text of that token (None: the run has no
            tokenizer); E3 names the tokens that carry massive activations with it.
        deciding: measure only what decides each verdict and its headline number, as a random-init twin needs (its
            verdict and headline are all its ``twin`` control reads): readings reported beside the verdict may be
            left out (E4's and E9's Fisher readings, E7's skip path).
        analyses: results that two estimators compute from identical statistics, computed once per run and
            keyed by a fingerprint of those statistics (E4 and E9 read the same per-layer cosines); read and
            filled under ``analyses_lock`` (analyses may run in parallel threads).
    """

    model: nn.Module
    adapter: Adapter
    attention: tuple[AttnWeights, ...]
    layers: int
    dim: int
    excluded: Tensor
    seed: int
    replicates: int
    detail_sequences: int
    model_name: str
    statistics: torch.dtype = torch.float64
    token_text: Callable[[int, int], str | None] | None = None
    deciding: bool = False
    analyses: dict = field(default_factory=dict, compare=False, repr=False)
    analyses_lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def kept(self) -> slice | Bool[Tensor, " token"]:
        """Index of the non-excluded positions along the token axis: a slice (a view, no copy) when they
        are contiguous, else a boolean mask."""
        idx = (~self.excluded).nonzero().flatten()
        if len(idx) and int(idx[-1] - idx[0]) + 1 == len(idx):
            return slice(int(idx[0]), int(idx[-1]) + 1)
        return ~self.excluded

    @property
    def title_name(self) -> str:
        """The model name for figure titles, as plain text (no mathtext)."""
        return plain_label(self.model_name)

    @property
    def slug(self) -> str:
        """The model name as a file-name prefix (``minilm``, ``smollm2``, ``my-bert``; a trained run's
        ``runs/ln/model`` folder gives ``ln-model``)."""
        parts = [p for p in self.model_name.replace("\\", "/").split("/") if p not in ("", ".")]
        base = "-".join(parts[-2:] if parts and parts[-1] == "model" else parts[-1:]).lower()
        return "".join(c if c.isalnum() or c in "-_" else "-" for c in base) or "model"


@dataclass
class Measured:
    """What an estimator measured, before any rule is applied.

    Attributes:
        arrays: the per-layer estimates and intervals the rule and the figure read (numpy arrays).
        metrics: the record's rule-free numbers (medians, counts of units), in display order.
        details: the record's per-layer series.
    """

    arrays: dict[str, np.ndarray]
    metrics: dict
    details: dict


@dataclass
class Judgement:
    """The stated rule applied to a ``Measured``: the verdict, the controls run through the same rule,
    the rule's own counts (shown before the measurement's metrics) and details, and the record's note."""

    verdict: str
    controls: list[Control]
    notes: str
    metrics: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)


class Estimator:
    """Base of the hypothesis estimators: pickles without the context (model and weights), so
    fitted statistics travel between processes cheaply; ``merge`` only reads fitted attributes.

    Subclasses set ``claim``, ``kind``, ``criterion`` (the rule, stated before the data) and ``method``, and
    define ``measure``, ``judge``, ``draw`` and ``statistics_bytes`` (their memory, known before the run).
    """

    ctx: ProbeContext
    claim: str
    kind: str = "empirical"
    criterion: str
    method: str

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.pop("ctx", None)
        return state

    def measure(self) -> Measured:
        """The numbers: estimates, intervals and series over layers (no verdict)."""
        raise NotImplementedError

    def judge(self, measured: Measured) -> Judgement:
        """The verdict of ``criterion`` on ``measured``, and the controls through the same rule."""
        raise NotImplementedError

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        """The figure of ``measured`` saved under ``out_dir`` (``[]`` without one)."""
        raise NotImplementedError

    tensors: tuple[str, ...] = ()  # the block tensors its ``update`` reads (``expattn.probes.models.adapters``)
    # what it asks of the model reading beyond its tensors, in the order the first one lacking is reported
    # (names of ``expattn.probes.models.adapters.CAPABILITIES``, offered through ``Adapter.offered``)
    needs: tuple[str, ...] = ()
    # True: its update or analysis replays the attention in float64 (``AttnWeights.to``), which keeps a float64 copy
    # of every attention module for the rest of the run (``taps.Replay``; ``probes.footprint`` counts it)
    float64_replay: bool = False

    @staticmethod
    def inapplicable(subject: Subject) -> str | None:
        """Why this hypothesis cannot apply to ``subject`` (a loaded model) beyond the tensors and capabilities its
        model reading offers (``tensors``, ``needs``), or None; the runner asks before building the estimator."""
        return None

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Bytes this estimator holds from the first batch to its record, for a run of sizes ``n`` (an upper
        bound where the data decide); ``probes.footprint`` sums them before the run."""
        raise NotImplementedError

    @staticmethod
    def analysis_bytes(n: Sizes) -> int:
        """Bytes ``measure`` allocates beside the statistics at its peak (float64 read-outs, eigendecompositions),
        freed when it returns; 0 for an analysis of vectors and scalars. ``probes.footprint`` counts it."""
        return 0

    def result(self, out_dir: Path | None, measured: Measured | None = None) -> Record:
        """``measure`` (or its outcome ``measured``, computed already), then ``judge`` and ``draw`` on its numbers,
        as one ``Record``."""
        measured = self.measure() if measured is None else measured
        judged = self.judge(measured)
        return Record(
            id=self.claim,
            kind=self.kind,
            verdict=judged.verdict,
            metrics={**judged.metrics, **measured.metrics},
            method=self.method,
            notes=judged.notes,
            criterion=self.criterion,
            controls=judged.controls,
            details={**measured.details, **judged.details},
            plots=self.draw(measured, out_dir),
        )


@dataclass(frozen=True)
class Batch:
    """One batch of sequences.

    Attributes:
        index: ``(batch,)`` global sequence indices.
        weights: ``(batch, replicates)`` Poisson bootstrap weights of these sequences.
        shared: per-block cache of statistics that several estimators compute from the same tensor
            (see ``shared``); the runner clears it before each block.
        carry: state handed from one block to the next within the batch (the massive-token flags of
            ``kept_weights``).
    """

    index: Tensor
    weights: Tensor
    shared: dict = field(default_factory=dict, compare=False, repr=False)
    carry: dict = field(default_factory=dict, compare=False, repr=False)


def shared(batch: Batch, name: str, x: Float[Tensor, "*shape"], compute: Callable[[Tensor], object]) -> object:
    """``compute(x)``, computed once per block for the tensor object ``x`` and statistic ``name``.

    Hook points often hand the same tensor to several estimators under different names (a post-LN
    block's ``input`` is its ``attn.input``; a pre-LN block's ``attn.residual`` is ``norm2.input``):
    the first estimator computes the statistic, the others read it from ``batch.shared``.
    """
    key = (name, id(x))
    hit = batch.shared.get(key)
    if hit is not None and hit[0] is x:
        return hit[1]
    value = compute(x)
    batch.shared[key] = (x, value)
    return value


VARIANTS = ("all", "excl")


def squared_norms(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch token"]:
    """$\\lVert x_t\\rVert^2$ per token, ``(batch, token)`` float64 (the norm summed in float32 over the D
    features in one pass, no squared copy of ``x``: relative error ~1e-7; squared and averaged over tokens
    in float64)."""
    return torch.linalg.vector_norm(x, dim=-1).double().square()


def second_moments(
    x: Float[Tensor, "batch token dim"],
    w: Float[Tensor, "batch token"] | None = None,
    sq: Float[Tensor, "batch token"] | None = None,
) -> tuple[Float[Tensor, " batch"], Float[Tensor, " batch"]]:
    r"""Per sequence: the spread $\operatorname{tr}\operatorname{Cov}$ (mean squared distance to the sequence
    centroid) and the mean squared norm; ``(batch,)`` each.

    $$\operatorname{tr}\operatorname{Cov} = \overline{\lVert x\rVert^2} - \lVert \bar x\rVert^2, \qquad
    \bar x = \frac{\sum_t w_t x_t}{\sum_t w_t},\quad
    \overline{\lVert x\rVert^2} = \frac{\sum_t w_t \lVert x_t\rVert^2}{\sum_t w_t}$$

    with weights ``w`` ``(batch, token)`` (1 = use the token, 0 = leave it out; ``None``: all ones) and
    ``sq`` = ``squared_norms(x)`` when the caller has it. Per-token squared norms and the centroid are
    float32, the difference float64: relative error about
    $10^{-7}\,\overline{\lVert x\rVert^2} / \operatorname{tr}\operatorname{Cov}$, and no centred copy of ``x``
    is made. (Not ``expattn.nn.norms.spread``, which is $\sqrt{\operatorname{tr}\operatorname{Cov}}$.)
    """
    sq = squared_norms(x) if sq is None else sq  # (B, T)
    if w is None:
        msn, mean = sq.mean(1), x.mean(1)
    else:
        count = w.sum(1, keepdim=True)  # (B, 1)
        msn = (sq * w.double()).sum(1) / count.squeeze(1).double()
        mean = torch.bmm(w.unsqueeze(1), x).squeeze(1) / count  # (B, D)
    return msn - mean.double().pow(2).sum(-1), msn


def shared_second_moments(
    batch: Batch,
    x: Float[Tensor, "batch token dim"],
    variant: str,
    kept: slice | Bool[Tensor, " token"],
    w: Float[Tensor, "batch kept"],
) -> tuple[Float[Tensor, " batch"], Float[Tensor, " batch"]]:
    """``second_moments`` of ``x`` over all tokens (``variant="all"``) or over ``x[:, kept]`` with the block's token
    weights ``w`` (``"excl"``, see ``kept_weights``), computed once per block and tensor (E1 and E2 read
    several of the same tensors), from the tensor's shared ``squared_norms``."""
    sq = shared(batch, "squared norms", x, squared_norms)
    if variant == "all":
        return shared(batch, "second moments all", x, lambda t: second_moments(t, sq=sq))
    return shared(batch, "second moments excl", x, lambda t: second_moments(t[:, kept], w, sq[:, kept]))


MASSIVE_FACTOR = 20.0
RESIDUAL_STREAM = ("input", "attn.residual", "norm2.input", "output")


def massive(sq: Float[Tensor, "batch token"]) -> Bool[Tensor, "batch token"]:
    r"""``(batch, token)`` True where $\lVert x_t\rVert > 20\,\operatorname{median}_s \lVert x_s\rVert$ within
    the sequence, from the squared norms ``sq`` ``(batch, token)`` (``squared_norms``; the median commutes with
    squaring): the "massive activations" of Sun et al. (2024), a handful of tokens (in Llama-family
    models the first token and now and then the first word after it) whose states are 100-1000 times
    larger than the others'. Left in, one of them dominates every pooled moment of a layer."""
    return sq > MASSIVE_FACTOR**2 * sq.median(dim=1, keepdim=True).values


def kept_weights(
    batch: Batch, tensors: dict[str, Tensor], kept: slice | Bool[Tensor, " token"]
) -> Float[Tensor, "batch kept"]:
    """``(batch, kept)`` float32 token weights of the ``"excl"`` variant in this block: 1 at the non-excluded
    positions, 0 where a token is massive (``massive``) in any residual-stream tensor of this block
    (``RESIDUAL_STREAM``) or of an earlier one: once flagged, a token stays out while its outsized state
    decays through the later blocks. One mask per block, so every ratio compares the same tokens."""

    def compute(_: Tensor) -> Tensor:
        flags = [
            massive(shared(batch, "squared norms", tensors[name], squared_norms)[:, kept])
            for name in RESIDUAL_STREAM
            if name in tensors
        ]
        flagged = torch.stack(flags).any(0)
        if "massive" in batch.carry:
            flagged |= batch.carry["massive"]
        batch.carry["massive"] = flagged
        return (~flagged).float()

    return shared(batch, "kept weights", tensors["input"], compute)


LEVEL = 0.95  # every interval of the probe: two-sided, percentile


def replicate_intervals(
    est: np.ndarray, lo: np.ndarray, hi: np.ndarray, reps: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    r"""Each bootstrap replicate's interval of each unit: the measured interval moved to the replicate's estimate,

    $$[\,r_b - (\hat\theta - \ell),\ r_b + (h - \hat\theta)\,]$$

    with $\hat\theta$ = ``est``, $[\ell, h]$ = ``lo, hi`` (any shape ``S``) and $r_b$ = ``reps`` ``(R, *S)``. A unit
    whose interval clears a threshold by a wide margin clears it in every replicate; one that clears it barely, in about
    half. (Each replicate's own interval would need a second bootstrap; its width differs from the measured one's
    only at second order.) Returns ``(low, high)``, each ``(R, *S)``."""
    return reps - (est - lo), reps + (hi - est)


def count_interval(sides: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` percentile interval of the number of units on one side, from ``sides`` ``(R, n)``: per
    bootstrap replicate, which units are on it."""
    counts = sides.sum(-1)
    alpha = (1 - level) / 2
    return float(np.quantile(counts, alpha)), float(np.quantile(counts, 1 - alpha))


def majority_verdict(
    above: np.ndarray, below: np.ndarray, above_reps: np.ndarray | None = None, below_reps: np.ndarray | None = None
) -> str:
    """``supported`` if most units are significant in the predicted direction, ``not_supported`` if most
    are significant against it, else ``inconclusive``. ``above``/``below`` are boolean arrays ``(n,)``.

    With the same per bootstrap replicate, ``above_reps``/``below_reps`` ``(R, n)`` (``replicate_intervals``), the
    count is a statistic with an interval (``count_interval``): a majority whose interval reaches down to half the
    units ($n/2$ or fewer: the fraction's interval contains 1/2) is ``inconclusive``, since another sample of
    sequences could have tipped it."""
    n = len(above)
    for verdict, sides, reps in (("supported", above, above_reps), ("not_supported", below, below_reps)):
        if sides.sum() > n / 2:
            if reps is not None and count_interval(reps)[0] <= n / 2:
                return "inconclusive"
            return verdict
    return "inconclusive"


def as_list(t: Float[Tensor, "*shape"] | Int[Tensor, "*shape"] | np.ndarray | list) -> list:
    """Numbers as a JSON-friendly list, six significant digits (tensors on any device: read to the host here)."""
    if isinstance(t, Tensor):
        t = t.detach().cpu()
    elif isinstance(t, list | tuple) and any(isinstance(v, Tensor) for v in t):
        t = [v.detach().cpu() if isinstance(v, Tensor) else v for v in t]
    return [float(f"{v:.6g}") for v in np.asarray(t, dtype=float).ravel()]


def figure(out_dir: Path | None, ncols: int = 2, width: float = 5.0):
    """A figure with ``ncols`` panels side by side and its axes, or ``(None, None)`` when no plot is wanted."""
    if out_dir is None:
        return None, None
    fig, axes = pyplot().subplots(1, ncols, figsize=(width * ncols, 3.8), squeeze=False)
    return fig, axes[0]


def save(fig, out_dir: Path | None, name: str) -> list[str]:
    """Save ``fig`` as ``out_dir/name`` and return ``[name]`` for ``Record.plots`` (``[]`` without a figure)."""
    if fig is None or out_dir is None:
        return []
    return save_figure(fig, out_dir, name)


def band(ax, x, est, lo, hi, label: str, **kw) -> None:
    """Line with a shaded interval."""
    line = ax.plot(x, est, marker="o", ms=3, label=label, **kw)[0]
    ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2)
