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
(the cross term averages to $\bar h\cdot\bar\Delta$, which the centroid removes). The verdict uses
the raw ratio without the first/special tokens: supported when, in most layers, the 95% bootstrap
interval of r lies above 1 and that of r minus the null ratio above 0.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from expattn.probes.common import (
    VARIANTS,
    Batch,
    Estimator,
    ProbeContext,
    as_list,
    band,
    figure,
    kept_weights,
    majority_verdict,
    save,
    shared_spread,
)
from expattn.probes.stats import BootstrapMeans
from expattn.results.record import Record

_F = 5  # spread before, spread after, msn before, msn after, expected spread with a shuffled update


class E1Expansion(Estimator):
    """Streaming E1 estimator (see module docstring). Fitted: ``stats_`` (BootstrapMeans)."""

    claim = "E1"

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
            sb, nb = shared_spread(batch, before, variant, kept, w)
            sa, na = shared_spread(batch, after, variant, kept, w)
            s_update, _ = shared_spread(batch, update, variant, kept, w)
            cols += [sb, sa, nb, na, sb + s_update]
        self._rows[i] = cols
        if i == self.ctx.layers - 1:
            values = torch.stack([c for j in range(self.ctx.layers) for c in self._rows.pop(j)], dim=1)
            self.stats_.update(values, batch.weights)

    def merge(self, other: E1Expansion) -> E1Expansion:
        self.stats_.merge(other.stats_)
        return self

    def _ratios(self, m: Tensor) -> Tensor:
        m = m.view(*m.shape[:-1], self.ctx.layers, len(VARIANTS), _F)
        sb, sa, nb, na, sn = m.unbind(-1)
        raw = sa / sb
        return torch.stack([raw, (sa / na) / (sb / nb), sn / sb, raw - sn / sb], dim=-1)  # (..., L, V, 4)

    def result(self, out_dir: Path | None) -> Record:
        est, lo, hi = (t.numpy() for t in self.stats_.interval(self._ratios))
        details: dict = {"tensors": {"before": "layers.i.input", "after": "layers.i.attn.residual"}}
        for v, variant in enumerate(VARIANTS):
            for k, name in enumerate(("raw_ratio", "normalized_ratio", "null_ratio", "raw_minus_null")):
                details[f"{name}_{variant}"] = {
                    "estimate": as_list(est[:, v, k]),
                    "low": as_list(lo[:, v, k]),
                    "high": as_list(hi[:, v, k]),
                }
        v = VARIANTS.index("excl")
        expands = (lo[:, v, 0] > 1) & (lo[:, v, 3] > 0)
        contracts = hi[:, v, 0] < 1
        verdict = majority_verdict(expands, contracts)
        metrics = {
            "layers_expanding": int(expands.sum()),
            "layers_contracting": int(contracts.sum()),
            "layers": self.ctx.layers,
            "median_raw_ratio_excl": float(np.median(est[:, v, 0])),
            "median_raw_ratio_all": float(np.median(est[:, 0, 0])),
            "median_normalized_ratio_excl": float(np.median(est[:, v, 1])),
            "median_null_ratio_excl": float(np.median(est[:, v, 2])),
            "sequences": self.stats_.n_,
        }
        fig, axes = figure(out_dir)
        if fig is not None:
            x = np.arange(self.ctx.layers)
            for ax, k, title in ((axes[0], 0, "raw spread ratio"), (axes[1], 1, "scale-normalised ratio")):
                for vi, variant in enumerate(VARIANTS):
                    band(ax, x, est[:, vi, k], lo[:, vi, k], hi[:, vi, k], f"{variant} tokens")
                if k == 0:
                    band(ax, x, est[:, v, 2], lo[:, v, 2], hi[:, v, 2], "null: shuffled update (excl)", ls="--")
                ax.axhline(1, color="k", lw=0.8)
                ax.set(xlabel="layer", ylabel="after / before", title=f"E1 {self.ctx.model_name}: {title}")
                ax.legend(fontsize=7)
        return Record(
            id="E1",
            kind="empirical",
            verdict=verdict,
            metrics=metrics,
            method=(
                "spread(attn.residual)/spread(input) per layer, Poisson bootstrap over sequences, shuffled-update null"
            ),
            notes="verdict: raw ratio without first/special tokens; interval above 1 and above the null in most layers",
            details=details,
            plots=save(fig, out_dir, f"{self.ctx.slug}_e1_expansion.png"),
        )
