r"""E6: is the FC (MLP) sublayer close to the identity, or to a linear map?

$$\rho_\ell = \frac{E\lVert \Delta\rVert^2}{E\lVert s\rVert^2},\qquad
R^2_\ell = 1 - \frac{\sum \lVert \Delta - W^\top x - b\rVert^2}{\sum\lVert \Delta - \bar\Delta\rVert^2}
\ \text{(held out)}$$

(seed 000 §4 and §6: the theory ignores the FC layer; how close is it to an identity mapping or a
purely linear layer?). $x$ = ``layers.i.mlp.input`` (what the MLP reads), $\Delta$ =
``layers.i.mlp.output`` (the update it adds), $s$ = ``layers.i.mlp.skip`` (the stream it is added
to). The block $s \mapsto s + \Delta$ is the identity when $\rho$ is small. The affine map is a ridge
fit scored by ``FOLDS``-fold cross-validation over sequences (sequence $j$ in fold $j \bmod 5$; each fold is
scored by the fit on the other four, 80% of the tokens), its $\lambda$ chosen from
``RIDGE_GRID`` $\cdot \operatorname{tr}S_{xx}/D$ by generalised cross-validation on the fit's folds alone
(one eigendecomposition of $S_{xx}$ for the whole grid; the scored fold takes no part in the choice);
the reported $R^2$ is the mean over the five held-out folds (each kept). Null baseline: the identity, whose
$R^2$ for the update is 0 by construction. Interval: Poisson bootstrap of $\rho$;
the folds bracket $R^2$. Tokens: without the first/special tokens and the block's
massive-activation tokens (``common.kept_weights``), the same ones E1-E4 set aside, in both $\rho$
and the fit. Criterion, fixed before the data: supported when most layers are close to the identity
($\rho$'s interval below 0.1) or close to linear ($R^2 \ge 0.9$), not supported when most are
neither; a majority whose count's bootstrap interval reaches half the layers is inconclusive
(``base.majority_verdict``: the count per replicate of $\rho$; the held-out $R^2$ side is fixed, its folds are
not resampled). The held-out $R^2$ of every ridge of the grid is reported beside the chosen one
(``ridge_grid``), never chosen from. Negative control through the same fit and rule: the update replaced by noise
of the skip's size per token ($\rho = 1$, nothing to fit), which must not be supported.

**Precision.** The statistics are float64 (or float32, ``--statistics``); the fits' eigendecompositions of
$S_{xx}$ and their $D^3$ products run in ``PRECISION``, float32 (the sums over ridges in float64), every layer of
a batch (``statistics.batches``) in one batched call. Against float64 the held-out $R^2$ at the chosen ridges moved
by at most 1.3e-5 (MiniLM) and 9.6e-5 (SmolLM2) at 2,048 tokens, within ``R2_TOLERANCE`` = 1e-4, the grid's by at
most 6.4e-4 (its smallest ridge amplifies the rounding of the smallest eigenvalues), and no chosen ridge changed;
the verdict compares $R^2$ with 0.9, from which those layers sit 0.027 and more
(``tests/unit/test_probe_e6_folds.py`` holds the same bounds on a fixture).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from jaxtyping import Bool, Int
from torch import Tensor

from expattn.probes.hypotheses.base import (
    VARIANTS,
    Batch,
    Estimator,
    Judgement,
    Measured,
    ProbeContext,
    as_list,
    band,
    count_interval,
    figure,
    kept_weights,
    majority_verdict,
    replicate_intervals,
    save,
    shared,
    squared_norms,
)
from expattn.probes.hypotheses.regression import CrossMoments
from expattn.probes.sizes import Sizes, bootstrap_bytes
from expattn.probes.statistics.batches import batches, per_batch
from expattn.probes.statistics.stats import BootstrapMeans
from expattn.results.record import Control

RIDGE_GRID = (1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)  # lambda / (tr S_xx / D); chosen per fit by GCV
RHO_LIMIT, R2_LIMIT = 0.1, 0.9
# Folds of the cross-validated R^2: each fit reads 80% of the tokens (two folds of 50% read 0.02-0.05 lower)
FOLDS = 5
PRECISION = torch.float32  # of the fits' eigendecompositions and products (module docstring)
R2_TOLERANCE = 1e-4  # the float32 fits' stated error on the held-out R^2 at the chosen ridge (module docstring)
# float64 (D, D) matrices per layer while its fits are read: per fold its statistics and its complement's ((D, 3D)
# each), their float32 copies, the eigenvectors, G, the held-out fold's rotated scatter and G G^T in both dtypes
# (12 per fold: tests/integration/test_probe_memory.py measures the peak within 10%)
FIT_MATRICES = 12 * FOLDS


def fit_bytes(dim: int) -> int:
    """The transient of one layer's fits in ``_fits``: ``FIT_MATRICES`` float64 ``(D, D)`` matrices."""
    return 8 * FIT_MATRICES * dim * dim


def fold_rows(index: Int[Tensor, " batch"], fold: int) -> slice | Bool[Tensor, " batch"]:
    """Rows of a batch (sequence indices ``index`` ``(batch,)``) whose sequence index is ``fold`` modulo ``FOLDS``: a
    step-``FOLDS`` slice (a view, no copy) when the indices are consecutive, as the runner's batches are, else a
    ``(batch,)`` boolean mask."""
    if len(index) > 1 and bool((index.diff() == 1).all()):
        return slice((fold - int(index[0])) % FOLDS, None, FOLDS)
    return index % FOLDS == fold


class E6Mlp(Estimator):
    """Streaming E6 estimator. Fitted: ``folds_`` (per layer, ``FOLDS`` CrossMoments: $x$ against the update and its
    noise control side by side, columns ``:D`` and ``D:``, one $S_{xx}$), ``stats_`` (BootstrapMeans)."""

    claim = "E6"
    tensors = ("input", "mlp.input", "mlp.output", "mlp.skip")
    method = (
        f"update/skip energy ratio (Poisson bootstrap) and {FOLDS}-fold cross-validated held-out R^2 (folds of "
        "sequences) of a ridge affine fit of the MLP update, ridge chosen by GCV on the fit's folds"
    )
    criterion = (
        f"supported iff in most layers the 95% interval of E|update|^2/E|skip|^2 lies below {RHO_LIMIT} "
        f"or the mean over {FOLDS} held-out folds of sequences of the R^2 of a ridge affine fit on the other folds "
        f"is >= {R2_LIMIT} (ridge chosen on the fit's folds alone by generalised cross-validation, the held-out fold "
        "only tests); not_supported iff in most neither; else inconclusive, as is a majority whose count's 95% "
        "bootstrap interval (the energy ratio per replicate) reaches half the layers; noise in place of the update "
        "must not be supported"
    )

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Per layer and fold: ``S_xx`` and the ``(D, 2D)`` ``S_xy`` of the update and its noise control, the means
        of x and y and the diagonal of ``S_yy``; bootstrap sums of two energies per layer and variant."""
        return FOLDS * n.layers * (3 * n.big + 40 * n.hidden) + bootstrap_bytes(n.layers * len(VARIANTS) * 2,
                                                                               n.replicates)

    @staticmethod
    def analysis_bytes(n: Sizes) -> int:
        """Beside the statistics while ``measure`` runs, one batch of layers at a time (``statistics.batches``):
        ``fit_bytes`` per layer."""
        return fit_bytes(n.hidden) * per_batch(n.layers, fit_bytes(n.hidden))

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        pair = (ctx.dim, 2 * ctx.dim, ctx.statistics)
        self.folds_ = [[CrossMoments(*pair) for _ in range(FOLDS)] for _ in range(ctx.layers)]
        self.stats_ = BootstrapMeans(ctx.layers * len(VARIANTS) * 2, ctx.replicates)
        self._rows: dict[int, list[Tensor]] = {}

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        x, delta, skip = tensors["mlp.input"], tensors["mlp.output"], tensors["mlp.skip"]
        kept = self.ctx.kept
        w = kept_weights(batch, tensors, kept)
        keep = w.bool()
        d2, s2 = (shared(batch, "squared norms", t, squared_norms) for t in (delta, skip))  # (B, T) each
        seed = self.ctx.seed + 6 + 1000 * int(batch.index[0]) + i
        gen = None if delta.is_meta else torch.Generator(delta.device).manual_seed(seed)  # meta: no values to draw
        # drawn where the data lives: a CPU draw moved to a GPU cost seconds per probe (one normal per entry of
        # every layer's update); the draws differ between devices, as the models' rounding does
        noise = torch.randn(delta[:, kept].shape, generator=gen, dtype=delta.dtype, device=delta.device)
        noise *= (s2[:, kept].sqrt() / noise.norm(dim=-1).double()).to(noise.dtype).unsqueeze(-1)  # |noise_t| = |s_t|
        for fold in range(FOLDS):
            rows = fold_rows(batch.index, fold)
            xs, ds, ns, k = x[rows][:, kept], delta[rows][:, kept], noise[rows], keep[rows]
            if not bool(k.all()):
                xs, ds, ns = xs[k], ds[k], ns[k]
            self.folds_[i][fold].update(xs, torch.cat((ds, ns), -1))
        cols = []
        for variant in VARIANTS:
            if variant == "all":
                cols += [d2.mean(1), s2.mean(1)]
            else:
                cols += [(d2[:, kept] * w).sum(1) / w.sum(1), (s2[:, kept] * w).sum(1) / w.sum(1)]
        self._rows[i] = cols
        if i == self.ctx.layers - 1:
            values = torch.stack([c for j in range(self.ctx.layers) for c in self._rows.pop(j)], dim=1)
            self.stats_.update(values, batch.weights)

    def merge(self, other: E6Mlp) -> E6Mlp:
        for mine, theirs in zip(self.folds_, other.folds_, strict=True):
            for a, b in zip(mine, theirs, strict=True):
                a.merge(b)
        self.stats_.merge(other.stats_)
        return self

    def _rho(self, m: Tensor) -> Tensor:
        m = m.view(*m.shape[:-1], self.ctx.layers, len(VARIANTS), 2)
        return m[..., 0] / m[..., 1]  # (..., L, V)

    def _fits(self, layers: range) -> tuple[Tensor, Tensor, Tensor]:
        """The ridge fits of ``layers``, one per held-out fold on the other folds' statistics, all decomposed in one
        batched call, for the update and for its noise control (``blocks``): the held-out R^2 at the ridge each
        fit's GCV chooses ``(block, layer, K)``, those ridges relative to ``tr S_xx / D`` ``(block, layer, K)``, and
        the held-out R^2 of every ridge of the grid ``(block, layer, grid, K)`` (reported, never chosen from), on
        the statistics' device. ``K`` is ``FOLDS``, or the number of folds that hold sequences where that is fewer
        (each fold then one sequence)."""
        folds = self._folds()
        stacked = CrossMoments.stack([[self.folds_[i][k] for k in folds] for i in layers])  # (layer, K, ...)
        path = stacked.held_out().ridge_path(RIDGE_GRID, PRECISION)
        blocks = (slice(0, self.ctx.dim), slice(self.ctx.dim, 2 * self.ctx.dim))  # update, noise control
        grid = path.r_squared(stacked, blocks)  # (layer, K, block, grid)
        pick = torch.stack([path.gcv(block).argmin(-1) for block in blocks], -1)  # (layer, K, block)
        chosen = grid.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
        ridges = torch.tensor(RIDGE_GRID, dtype=torch.float64, device=pick.device)[pick]
        return chosen.permute(2, 0, 1), ridges.permute(2, 0, 1), grid.permute(2, 0, 3, 1)

    def _folds(self) -> list[int]:
        """The folds that hold tokens in every layer (two at least, each of two tokens or more), else ValueError."""
        folds = [k for k in range(FOLDS) if all(layer[k].n_ > 0 for layer in self.folds_)]
        if len(folds) < 2 or any(layer[k].n_ < 2 for layer in self.folds_ for k in folds):
            raise ValueError(f"E6 needs at least two sequences for its folds of sequences (up to {FOLDS})")
        return folds

    def measure(self) -> Measured:
        est, lo, hi = (t.cpu().numpy() for t in self.stats_.interval(self._rho))
        lo_rep, hi_rep = replicate_intervals(est, lo, hi, self.stats_.replicates(self._rho).cpu().numpy())
        device = self.folds_[0][0].sxx_.device  # the statistics'
        fits = [self._fits(layers) for layers in batches(self.ctx.layers, fit_bytes(self.ctx.dim), device)]
        both, chosen, grid = (torch.cat(parts, 1).cpu().numpy() for parts in zip(*fits, strict=True))
        r2, chosen, grid = both[0], chosen[0], grid[0].mean(-1)  # (L, K), (L, K), (L, grid)
        r2_control = both[1].mean(-1)
        v = VARIANTS.index("excl")
        details = {
            "tensors": {"x": "layers.i.mlp.input", "update": "layers.i.mlp.output", "skip": "layers.i.mlp.skip"},
            **{f"heldout_r2_fold{k}": as_list(r2[:, k]) for k in range(r2.shape[1])},
            **{f"ridge_chosen_fold{k}": as_list(chosen[:, k]) for k in range(r2.shape[1])},
            "ridge_grid": {f"{lam:g}": as_list(grid[:, g]) for g, lam in enumerate(RIDGE_GRID)},
            "tokens_per_fold": [int(m.n_) for m in self.folds_[0]],
            "folds": f"sequence j in fold j mod {FOLDS}; each fold scored by the fit on the others ({r2.shape[1]} "
            "folds held sequences)",
            "ridge_choice": "per fit, the ridge of RIDGE_GRID (x tr S_xx / D) with the least generalised "
            "cross-validation score on the fit's folds; ridge_grid's held-out R^2 are shown, never chosen from. GCV "
            "cannot validate when a fit has fewer tokens than the width D (quick budgets of wide models)",
            "tokens": "first/special and massive-activation tokens set aside (as in E1-E4)",
        }
        for vi, variant in enumerate(VARIANTS):
            details[f"update_ratio_{variant}"] = {
                "estimate": as_list(est[:, vi]),
                "low": as_list(lo[:, vi]),
                "high": as_list(hi[:, vi]),
            }
        metrics = {
            "layers": self.ctx.layers,
            "median_update_ratio_excl": float(np.median(est[:, v])),
            "median_update_ratio_all": float(np.median(est[:, 0])),
            "median_heldout_r2": float(np.median(r2.mean(1))),
            "min_heldout_r2": float(r2.min()),
            "max_heldout_r2": float(r2.max()),
        }
        arrays = {"est": est, "lo": lo, "hi": hi, "lo_rep": lo_rep, "hi_rep": hi_rep, "r2": r2,
                  "r2_control": r2_control}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a = measured.arrays
        lo, hi, r2_control, v = a["lo"], a["hi"], a["r2_control"], VARIANTS.index("excl")
        identity = hi[:, v] < RHO_LIMIT
        linear = a["r2"].mean(1) >= R2_LIMIT
        neither = (lo[:, v] > RHO_LIMIT) & ~linear
        identity_rep, neither_rep = a["hi_rep"][..., v] < RHO_LIMIT, (a["lo_rep"][..., v] > RHO_LIMIT) & ~linear
        control = Control("update replaced by noise of the skip's size (rho = 1)", "negative",
                          majority_verdict(r2_control >= R2_LIMIT, r2_control < R2_LIMIT),
                          {"median_heldout_r2": float(np.median(r2_control)), "update_ratio": 1.0})
        notes = (
            f"verdict without first/special and massive tokens: identity if ratio interval < {RHO_LIMIT}, "
            f"linear if held-out R^2 >= {R2_LIMIT}"
        )
        metrics = {"layers_close_to_identity": int(identity.sum()), "layers_close_to_linear": int(linear.sum()),
                   "layers_identity_or_linear_interval": count_interval(identity_rep | linear),
                   "layers_neither_interval": count_interval(neither_rep)}
        verdict = majority_verdict(identity | linear, neither, identity_rep | linear, neither_rep)
        return Judgement(verdict, [control], notes, metrics)

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir)
        if fig is None:
            return []
        est, lo, hi, r2 = (measured.arrays[k] for k in ("est", "lo", "hi", "r2"))
        x = np.arange(self.ctx.layers)
        for vi, variant in enumerate(VARIANTS):
            band(axes[0], x, est[:, vi], lo[:, vi], hi[:, vi], f"{variant} tokens")
        axes[0].axhline(RHO_LIMIT, color="k", ls="--", lw=0.8, label="identity threshold")
        axes[0].set_yscale("log")
        name = self.ctx.title_name
        axes[0].set(xlabel="layer", ylabel="E|update|^2 / E|skip|^2", title=f"E6 {name}: MLP update size")
        axes[1].fill_between(x, r2.min(1), r2.max(1), alpha=0.3)
        axes[1].plot(x, r2.mean(1), marker="o", ms=3, label=f"held-out R^2 of ridge (mean of {r2.shape[1]} folds)")
        axes[1].axhline(0, color="k", lw=0.8, label="null: identity (R^2 = 0)")
        axes[1].axhline(R2_LIMIT, color="k", ls="--", lw=0.8, label="linear threshold")
        axes[1].set(xlabel="layer", ylabel="R^2 of the update", title=f"E6 {name}: affine fit of the MLP")
        for ax in axes:
            ax.legend(fontsize=7)
        return save(fig, out_dir, f"{self.ctx.slug}_e6_mlp.png")
