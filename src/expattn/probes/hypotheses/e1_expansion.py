r"""E1: does the residual attention update expand the cloud of token states within a sequence?

$$\text{spread}(X) = \tfrac1T \sum_t \lVert x_t - \bar x\rVert^2,\qquad
r_\ell = \frac{\text{spread}(\texttt{attn.residual})}{\text{spread}(\texttt{input})}
= \frac{\text{spread}(H + \mathrm{Attn}(H))}{\text{spread}(H)}$$

(seed 000 §3.3: the residual step $\eta + \nabla G(\eta)$ pushes points outward). Compared tensors:
``layers.i.input`` (residual stream entering block i) and ``layers.i.attn.residual`` (the same
stream after the attention update is added; for BERT this is before the post-LayerNorm).
Reported raw, and scale-normalised (each spread divided by the mean squared norm of the same
tokens), over all tokens and without the first/special tokens and the block's massive-activation
tokens (``common.kept_weights``). Null baseline: the same update with its vectors shuffled across
the (used) tokens of the sequence, so that sizes stay and any alignment with the states goes, in
expectation over all shuffles, which is exact and needs no random draw: with $\Delta = \mathrm{Attn}(H)$
(``layers.i.attn.output``, the update that ``attn.residual`` adds to ``input``)
and $\pi$ uniform, $E_\pi\,\text{spread}(H + P_\pi\Delta) = \text{spread}(H) + \text{spread}(\Delta)$
(the cross term averages to $\bar h\cdot\bar\Delta$, which the centroid removes). Criterion, fixed
before the data: the raw ratio without the first/special and massive tokens decides; supported when,
in most layers, the 95% bootstrap interval of r lies above 1 and that of r minus the null ratio
above 0, not supported when in most it lies below 1; a majority whose count's 95% bootstrap interval
reaches half the layers is inconclusive (``base.majority_verdict``). The scale-free reading gets its own
verdict by the same rule without the null (``readings``). Controls, through the same rule and intervals: the
update replaced by $\Delta = (f - 1)(h - \bar h)$, a shrinking one ($f = 1/2$, negative: must not be
supported) and a growing one ($f = 3/2$, positive), whose spreads follow exactly from the measured ones.
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
from expattn.probes.hypotheses.readings import GROW, SHRINK, growth_verdict, readings, scaled
from expattn.probes.sizes import Sizes, bootstrap_bytes
from expattn.probes.statistics.stats import BootstrapMeans
from expattn.results.record import Control

CRITERION = (
    "raw spread ratio attn.residual/input without first/special and massive tokens: supported iff in most "
    "layers its 95% bootstrap interval lies above 1 and the interval of (ratio - shuffled-update null) above 0; "
    "not_supported iff in most it lies below 1; else inconclusive, as is a majority whose count's 95% bootstrap "
    "interval (each replicate's intervals moved to its estimate) reaches half the layers. The scale-free ratio "
    "gets its own verdict by the same rule without the null. Negative control: a shrinking update (must not be "
    "supported); positive: a growing one"
)
COLUMNS = ("raw_ratio", "normalized_ratio", "null_ratio", "raw_minus_null")

_F = 5  # spread before, spread after, msn before, msn after, expected spread with a shuffled update


class E1Expansion(Estimator):
    """Streaming E1 estimator (see module docstring). Fitted: ``stats_`` (BootstrapMeans)."""

    claim = "E1"
    tensors = ("input", "attn.residual", "attn.output")
    criterion = CRITERION
    method = "spread(attn.residual)/spread(input) per layer, Poisson bootstrap over sequences, shuffled-update null"

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Bootstrap sums of ``_F`` spreads per layer and variant."""
        return bootstrap_bytes(n.layers * len(VARIANTS) * _F, n.replicates)

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        self.stats_ = BootstrapMeans(ctx.layers * len(VARIANTS) * _F, ctx.replicates)
        self._rows: dict[int, list[Tensor]] = {}

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        before, after, update = tensors["input"], tensors["attn.residual"], tensors["attn.output"]
        kept = self.ctx.kept
        w = kept_weights(batch, tensors, kept)
        cols = []
        for variant in VARIANTS:
            sb, nb = shared_second_moments(batch, before, variant, kept, w)
            sa, na = shared_second_moments(batch, after, variant, kept, w)
            s_update, _ = shared_second_moments(batch, update, variant, kept, w)
            cols += [sb, sa, nb, na, sb + s_update]
        self._rows[i] = cols
        if i == self.ctx.layers - 1:
            values = torch.stack([c for j in range(self.ctx.layers) for c in self._rows.pop(j)], dim=1)
            self.stats_.update(values, batch.weights)

    def merge(self, other: E1Expansion) -> E1Expansion:
        self.stats_.merge(other.stats_)
        return self

    def _ratios(self, m: Tensor) -> Tensor:
        """``(..., L, V, 3, 4)``: the COLUMNS of the measured update, then of the shrinking and the growing
        control update."""
        m = m.view(*m.shape[:-1], self.ctx.layers, len(VARIANTS), _F)
        sb, sa, nb, na, sn = m.unbind(-1)
        cases = [(sa, na, sn)]
        for factor in (SHRINK, GROW):
            s_after, n_after = scaled(sb, nb, factor)
            cases.append((s_after, n_after, sb + (factor - 1) ** 2 * sb))
        out = []
        for s_after, n_after, s_null in cases:
            raw, free = readings(sb, s_after, nb, n_after)
            out.append(torch.stack([raw, free, s_null / sb, raw - s_null / sb], dim=-1))
        return torch.stack(out, dim=-2)

    def measure(self) -> Measured:
        est_all, lo_all, hi_all = (t.cpu().numpy() for t in self.stats_.interval(self._ratios))
        reps = self.stats_.replicates(self._ratios).cpu().numpy()  # (R, *est_all.shape)
        lo_rep, hi_rep = replicate_intervals(est_all, lo_all, hi_all, reps)
        est, lo, hi = est_all[..., 0, :], lo_all[..., 0, :], hi_all[..., 0, :]
        details: dict = {"tensors": {"before": "layers.i.input", "after": "layers.i.attn.residual"}}
        for v, variant in enumerate(VARIANTS):
            for k, name in enumerate(COLUMNS):
                details[f"{name}_{variant}"] = {
                    "estimate": as_list(est[:, v, k]),
                    "low": as_list(lo[:, v, k]),
                    "high": as_list(hi[:, v, k]),
                }
        v = VARIANTS.index("excl")
        metrics = {
            "layers": self.ctx.layers,
            "median_raw_ratio_excl": float(np.median(est[:, v, 0])),
            "median_raw_ratio_all": float(np.median(est[:, 0, 0])),
            "median_normalized_ratio_excl": float(np.median(est[:, v, 1])),
            "median_null_ratio_excl": float(np.median(est[:, v, 2])),
            "sequences": self.stats_.n_,
        }
        arrays = {"est_all": est_all, "lo_all": lo_all, "hi_all": hi_all, "est": est, "lo": lo, "hi": hi,
                  "lo_rep_all": lo_rep, "hi_rep_all": hi_rep}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a = measured.arrays
        lo, hi, v = a["lo"], a["hi"], VARIANTS.index("excl")
        lo_r, hi_r = a["lo_rep_all"][..., v, :, :], a["hi_rep_all"][..., v, :, :]  # (R, L, 3, 4)
        verdict = growth_verdict(lo[:, v, 0], hi[:, v, 0], lo[:, v, 3],
                                 (lo_r[..., 0, 0], hi_r[..., 0, 0], lo_r[..., 0, 3]))
        scale_free = growth_verdict(lo[:, v, 1], hi[:, v, 1], None, (lo_r[..., 0, 1], hi_r[..., 0, 1]))
        controls = []
        for c, (name, kind) in enumerate((("shrinking update", "negative"), ("growing update", "positive")), start=1):
            lo_c, hi_c = a["lo_all"][:, v, c], a["hi_all"][:, v, c]
            controls.append(Control(
                f"{name}: attention update replaced by ({(SHRINK, GROW)[c - 1]:g} - 1)(h - mean h)", kind,
                growth_verdict(lo_c[:, 0], hi_c[:, 0], lo_c[:, 3], (lo_r[..., c, 0], hi_r[..., c, 0], lo_r[..., c, 3])),
                {"median_raw_ratio": float(np.median(a["est_all"][:, v, c, 0])),
                 "median_scale_free_ratio": float(np.median(a["est_all"][:, v, c, 1]))},
            ))
        metrics = {
            "layers_expanding": int(((lo[:, v, 0] > 1) & (lo[:, v, 3] > 0)).sum()),
            "layers_expanding_interval": count_interval((lo_r[..., 0, 0] > 1) & (lo_r[..., 0, 3] > 0)),
            "layers_contracting": int((hi[:, v, 0] < 1).sum()),
            "layers_contracting_interval": count_interval(hi_r[..., 0, 0] < 1),
            "layers_expanding_scale_free": int((lo[:, v, 1] > 1).sum()),
            "layers_contracting_scale_free": int((hi[:, v, 1] < 1).sum()),
        }
        return Judgement(verdict, controls, f"raw reading (the verdict): {verdict}; scale-free reading: {scale_free}",
                         metrics, {"verdicts": {"raw": verdict, "scale_free": scale_free}})

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir)
        if fig is None:
            return []
        est, lo, hi = (measured.arrays[k] for k in ("est", "lo", "hi"))
        v, x = VARIANTS.index("excl"), np.arange(self.ctx.layers)
        for ax, k, title in ((axes[0], 0, "raw spread ratio"), (axes[1], 1, "scale-normalised ratio")):
            for vi, variant in enumerate(VARIANTS):
                band(ax, x, est[:, vi, k], lo[:, vi, k], hi[:, vi, k], f"{variant} tokens")
            if k == 0:
                band(ax, x, est[:, v, 2], lo[:, v, 2], hi[:, v, 2], "null: shuffled update (excl)", ls="--")
            ax.axhline(1, color="k", lw=0.8)
            ax.set(xlabel="layer", ylabel="after / before", title=f"E1 {self.ctx.title_name}: {title}")
            ax.legend(fontsize=7)
        return save(fig, out_dir, f"{self.ctx.slug}_e1_expansion.png")
