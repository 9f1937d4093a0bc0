r"""E2: does the normalization sublayer contract the cloud of token states?

$$c_\ell = \frac{\text{spread}(\texttt{norm.output})}{\text{spread}(\texttt{norm.input})},\qquad
\tilde c_\ell = \frac{\text{spread}(\texttt{norm.output}) / \overline{\lVert \texttt{norm.output}\rVert^2}}
{\text{spread}(\texttt{norm.input}) / \overline{\lVert \texttt{norm.input}\rVert^2}}$$

(seed 000 §3.3 and 002: LayerNorm/RMSNorm undo the expansion). Both normalizations of every block
are measured, ``layers.i.norm1`` and ``layers.i.norm2``, comparing each one's input with its
output. Where they sit differs: BERT (post-LN) normalizes the residual stream itself
(``attn.residual`` -> block's next stream); GPT-2/Llama (pre-LN) normalize only the branch input,
so their output is read by attention/MLP and the residual stream is never normalized inside a
block: each norm is read on the tensors it maps (post-LN: the residual stream; pre-LN: the branch
input). The raw ratio includes the overall rescaling; the scale-normalised ratio tests a change of
shape (a uniform rescaling of all tokens gives exactly 1). Criterion, fixed before the data and the
same as E1's (``readings``): the raw ratio without the first/special tokens and the block's
massive-activation tokens (``common.kept_weights``) decides; supported when most norm sublayers have
its 95% interval below 1, not supported when most have it above 1; a majority whose count's 95% bootstrap
interval reaches half the sublayers is inconclusive (``base.majority_verdict``). The scale-free reading gets its
own verdict by the same rule. Controls through the same rule: the norm replaced by a map that
scales the cloud about its centroid by 3/2 (negative: must not be supported) or by 1/2 (positive).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
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
    replicate_intervals,
    save,
    shared_second_moments,
)
from expattn.probes.hypotheses.readings import GROW, SHRINK, contraction_verdict, readings, scaled
from expattn.probes.sizes import Sizes, bootstrap_bytes
from expattn.probes.statistics.stats import BootstrapMeans
from expattn.results.record import Control

CRITERION = (
    "raw spread ratio norm.output/norm.input without first/special and massive tokens: supported iff in most "
    "norm sublayers its 95% bootstrap interval lies below 1; not_supported iff in most it lies above 1; else "
    "inconclusive, as is a majority whose count's 95% bootstrap interval (each replicate's intervals moved to its "
    "estimate) reaches half the sublayers. The scale-free ratio gets its own verdict by the same rule. Negative "
    "control: the norm replaced by a growing map (must not be supported); positive: a shrinking one"
)

NORMS = ("norm1", "norm2")
_F = 4  # spread in, spread out, msn in, msn out


class E2Normalization(Estimator):
    """Streaming E2 estimator (see module docstring). Fitted: ``stats_`` (BootstrapMeans)."""

    claim = "E2"
    tensors = ("input", "norm1.input", "norm1.output", "norm2.input", "norm2.output")
    needs = ("blocks.two_norms",)
    criterion = CRITERION
    method = "spread(norm output)/spread(norm input) for both norms per block, Poisson bootstrap over sequences"

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Bootstrap sums of ``_F`` spreads per layer, norm and variant."""
        return bootstrap_bytes(n.layers * len(NORMS) * len(VARIANTS) * _F, n.replicates)

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        self.stats_ = BootstrapMeans(ctx.layers * len(NORMS) * len(VARIANTS) * _F, ctx.replicates)
        self._rows: dict[int, list[Tensor]] = {}

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        kept = self.ctx.kept
        w = kept_weights(batch, tensors, kept)
        cols = []
        for norm in NORMS:
            x, y = tensors[f"{norm}.input"], tensors[f"{norm}.output"]
            for variant in VARIANTS:
                sx, nx = shared_second_moments(batch, x, variant, kept, w)
                sy, ny = shared_second_moments(batch, y, variant, kept, w)
                cols += [sx, sy, nx, ny]
        self._rows[i] = cols
        if i == self.ctx.layers - 1:
            values = torch.stack([c for j in range(self.ctx.layers) for c in self._rows.pop(j)], dim=1)
            self.stats_.update(values, batch.weights)

    def merge(self, other: E2Normalization) -> E2Normalization:
        self.stats_.merge(other.stats_)
        return self

    def _ratios(self, m: Tensor) -> Tensor:
        m = m.view(*m.shape[:-1], self.ctx.layers, len(NORMS), len(VARIANTS), _F)
        sx, sy, nx, ny = m.unbind(-1)
        cases = [(sy, ny), scaled(sx, nx, GROW), scaled(sx, nx, SHRINK)]  # measured, negative, positive control
        return torch.stack([torch.stack(readings(sx, s, nx, n), dim=-1) for s, n in cases], dim=-2)  # (..., 3, 2)

    def measure(self) -> Measured:
        est_all, lo_all, hi_all = (t.cpu().numpy() for t in self.stats_.interval(self._ratios))
        reps = self.stats_.replicates(self._ratios).cpu().numpy()  # (R, *est_all.shape)
        lo_rep, hi_rep = replicate_intervals(est_all, lo_all, hi_all, reps)
        est, lo, hi = est_all[..., 0, :], lo_all[..., 0, :], hi_all[..., 0, :]
        pos = self.ctx.adapter.norm_position
        where = {
            "post": {
                "norm1": "attn.residual -> norm1.output (residual stream)",
                "norm2": "mlp.residual -> block output (residual stream)",
            },
            "pre": {
                "norm1": "block input -> attn.input (branch only)",
                "norm2": "attn.residual -> mlp.input (branch only)",
            },
        }[pos]
        details: dict = {"norm_position": pos, "tensors": where}
        for n, norm in enumerate(NORMS):
            for v, variant in enumerate(VARIANTS):
                for k, name in enumerate(("raw_ratio", "normalized_ratio")):
                    details[f"{norm}_{name}_{variant}"] = {
                        "estimate": as_list(est[:, n, v, k]),
                        "low": as_list(lo[:, n, v, k]),
                        "high": as_list(hi[:, n, v, k]),
                    }
        v = VARIANTS.index("excl")
        metrics = {
            "norms": int(hi[:, :, v, 0].size),
            "median_normalized_ratio_excl": float(np.median(est[:, :, v, 1])),
            "median_normalized_ratio_all": float(np.median(est[:, :, 0, 1])),
            "median_raw_ratio_excl": float(np.median(est[:, :, v, 0])),
            "sequences": self.stats_.n_,
        }
        arrays = {"est_all": est_all, "lo_all": lo_all, "hi_all": hi_all, "est": est, "lo": lo, "hi": hi,
                  "lo_rep_all": lo_rep, "hi_rep_all": hi_rep}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a = measured.arrays
        lo, hi, v = a["lo"], a["hi"], VARIANTS.index("excl")
        r = a["lo_rep_all"].shape[0]
        lo_r, hi_r = (a[k][..., v, :, :].reshape(r, -1, 3, 2) for k in ("lo_rep_all", "hi_rep_all"))  # (R, units, 3, 2)
        verdict = contraction_verdict(lo[:, :, v, 0].ravel(), hi[:, :, v, 0].ravel(),
                                      (lo_r[..., 0, 0], hi_r[..., 0, 0]))
        scale_free = contraction_verdict(lo[:, :, v, 1].ravel(), hi[:, :, v, 1].ravel(),
                                         (lo_r[..., 0, 1], hi_r[..., 0, 1]))
        controls = [
            Control(f"norm replaced by x -> mean x + {factor:g} (x - mean x)", kind,
                    contraction_verdict(a["lo_all"][:, :, v, c, 0].ravel(), a["hi_all"][:, :, v, c, 0].ravel(),
                                        (lo_r[..., c, 0], hi_r[..., c, 0])),
                    {"median_raw_ratio": float(np.median(a["est_all"][:, :, v, c, 0]))})
            for c, (factor, kind) in enumerate(((GROW, "negative"), (SHRINK, "positive")), start=1)
        ]
        metrics = {
            "norms_contracting": int((hi[:, :, v, 0] < 1).sum()),
            "norms_contracting_interval": count_interval(hi_r[..., 0, 0] < 1),
            "norms_expanding": int((lo[:, :, v, 0] > 1).sum()),
            "norms_expanding_interval": count_interval(lo_r[..., 0, 0] > 1),
            "norms_contracting_shape": int((hi[:, :, v, 1] < 1).sum()),
            "norms_expanding_shape": int((lo[:, :, v, 1] > 1).sum()),
        }
        return Judgement(verdict, controls,
                         f"raw reading (the verdict): {verdict}; scale-free reading (shape): {scale_free}",
                         metrics, {"verdicts": {"raw": verdict, "scale_free": scale_free}})

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir)
        if fig is None:
            return []
        est, lo, hi = (measured.arrays[k] for k in ("est", "lo", "hi"))
        pos, x = self.ctx.adapter.norm_position, np.arange(self.ctx.layers)
        for ax, k, title in ((axes[0], 0, "raw spread ratio"), (axes[1], 1, "scale-normalised ratio")):
            for n, norm in enumerate(NORMS):
                for vi, variant in enumerate(VARIANTS):
                    band(ax, x, est[:, n, vi, k], lo[:, n, vi, k], hi[:, n, vi, k], f"{norm}, {variant}")
            ax.axhline(1, color="k", lw=0.8, label="null: uniform rescaling" if k else None)
            ax.set(xlabel="layer", ylabel="output / input", title=f"E2 {self.ctx.title_name} ({pos}-norm): {title}")
            if k == 0:
                ax.set_yscale("log")
            ax.legend(fontsize=7)
        return save(fig, out_dir, f"{self.ctx.slug}_e2_normalization.png")
