r"""E3: how far from Gaussian and from isotropic are the hidden states, layer by layer?

Along $K$ fixed random unit directions $u_k$ (the same for every layer), with $y = u_k^\top x$:

$$\text{skew}_k = \frac{E(y-\bar y)^3}{\sigma^3},\quad \kappa_k = \frac{E(y-\bar y)^4}{\sigma^4} - 3,\qquad
\text{PR} = \frac{(\operatorname{tr}\Sigma)^2}{D\,\operatorname{tr}\Sigma^2},\qquad
\text{aniso} = E\cos(x_t, x'_{t'})$$

(seed 000 §6: the "useful experiment" of watching the distribution change layer by layer;
Thm. 1 predicts a Gaussian equilibrium; anisotropy as in Ethayarajh 2019: mean cosine of
randomly paired tokens, here averaged over every pair of distinct tokens within a sequence, so
that it does not depend on how sequences are batched or sharded). Tensors: ``layers.i.input`` for
every block (depth 0 = embeddings) and the last block's ``output``. Null baseline: a Gaussian with
the same number of tokens has $E|\kappa| = \sqrt{24/n}\sqrt{2/\pi}$, $\text{PR} \approx 1/(1 + D/n)$
if isotropic, and cosine 0.
Reported with all tokens and without the first/special tokens and the massive-activation tokens
(``common.kept_weights``: a token whose state is over 20 times the sequence's median norm; in
SmolLM2 a word right after the first token now and then). Verdict (without them): the
hidden states are "close to Gaussian" when mean $|\kappa| < 1$ and mean $|\text{skew}| < 0.5$ at
most depths (supported); not supported when the interval of mean $|\kappa|$ lies above 1 at most depths.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from expattn.probes.common import (
    MASSIVE_FACTOR,
    VARIANTS,
    Batch,
    Estimator,
    ProbeContext,
    as_list,
    band,
    figure,
    kept_weights,
    save,
    shared,
    squared_norms,
)
from expattn.probes.stats import BootstrapMeans, Moments
from expattn.results.record import Record

DIRECTIONS = 32
KURTOSIS_LIMIT, SKEW_LIMIT = 1.0, 0.5


def _token_mean(v: Tensor, w: Tensor | None) -> Tensor:
    """Mean over the token axis (dim 1) of ``v``, weighted by ``w`` (broadcasting to ``v``) unless ``None``."""
    return v.mean(1) if w is None else (v * w).sum(1) / w.sum(1)


def mean_pair_cosine(x: Tensor, norm: Tensor, w: Tensor) -> Tensor:
    r"""Per sequence, the mean cosine over all pairs of distinct used tokens, ``(batch,)`` float64:

    $$\frac{\sum_{s\ne t} w_s w_t \cos(x_s, x_t)}{\sum_{s\ne t} w_s w_t}
    = \frac{\lVert \sum_t w_t \hat x_t\rVert^2 - \sum_t w_t^2 \lVert\hat x_t\rVert^2}{(\sum_t w_t)^2 - \sum_t w_t^2},
    \qquad \hat x_t = x_t / \max(\lVert x_t\rVert, 10^{-8})$$

    the expectation of the cosine between two tokens drawn at random (Ethayarajh 2019), over every pair
    at once: one weighted sum of the tokens, no pairing. ``x`` ``(batch, token, D)``, ``norm`` its
    per-token norms and ``w`` ``(batch, token)`` token weights (1 = use, 0 = leave out)."""
    c = w / norm.clamp_min(1e-8)  # (B, T)
    total = torch.bmm(c.unsqueeze(1), x).squeeze(1).double()  # (B, D): sum_t w_t x_t / |x_t|
    diagonal = (c * norm).double().pow(2).sum(1)
    weights = w.double().sum(1)
    return (total.pow(2).sum(1) - diagonal) / (weights.pow(2) - w.double().pow(2).sum(1))


def kept_moments(
    x: Tensor, kept: slice | Tensor, keep: Tensor, directions: Tensor | None = None, projections: Tensor | None = None
) -> Moments:
    """Count, mean, scatter (and projected moments) of the tokens of ``x[:, kept]`` where ``keep`` ``(B, kept)``
    is True: the ``"excl"`` tokens of a block, shared by E3 and E4 (on post-LN models both read ``input``).
    ``projections`` ``(B, T, K)``: ``x @ directions`` if already computed."""
    xs, ys = x[:, kept], None if projections is None else projections[:, kept]
    if not bool(keep.all()):  # a massive token: masked copies (otherwise the views are read in place)
        xs, ys = xs[keep], None if ys is None else ys[keep]
    return Moments.of(xs, True, directions, ys)


class E3Gaussianity(Estimator):
    """Streaming E3 estimator. Fitted: ``kept_``/``special_`` (per depth ``Moments``), ``boot_`` (BootstrapMeans)."""

    claim = "E3"

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        gen = torch.Generator().manual_seed(ctx.seed + 3)
        u = torch.randn(ctx.dim, DIRECTIONS, generator=gen, dtype=torch.float64)
        self.directions = u / u.norm(dim=0)
        self._directions32 = self.directions.float()
        self.depths = ctx.layers + 1
        self.kept_ = [Moments(ctx.dim, True, self.directions) for _ in range(self.depths)]
        self.special_ = [Moments(ctx.dim, True, self.directions) for _ in range(self.depths)]
        self.massive_ = [0] * self.depths  # tokens left out of "excl" as massive activations, per depth
        # per depth and variant: anisotropy, then raw moments 1..4 of each projection
        self._f = len(VARIANTS) * (1 + 4 * DIRECTIONS)
        self.boot_ = BootstrapMeans(self.depths * self._f, ctx.replicates)
        self._rows: list[Tensor] = []

    def _depth(self, d: int, x: Tensor, batch: Batch, w: Tensor) -> None:
        """Statistics of depth ``d`` from ``x`` ``(B, T, D)``; ``w`` ``(B, kept)`` the block's token weights."""
        kept, keep = self.ctx.kept, w.bool()
        y_all = x @ self._directions32  # (B, T, K), float32 projections; moments in float64 below
        moments = shared(batch, "moments kept", x, lambda t: kept_moments(t, kept, keep, self.directions, y_all))
        self.kept_[d].merge(moments)
        xk = x[:, kept]
        self.special_[d].update(torch.cat([x[:, self.ctx.excluded].flatten(0, 1), xk[~keep]]))
        self.massive_[d] += int((~keep).sum())
        norm_all = shared(batch, "squared norms", x, squared_norms).sqrt().float()  # (B, T), computed once
        cols = []
        for variant in VARIANTS:
            if variant == "all":
                xs, y, norm, used, wt = x, y_all, norm_all, torch.ones_like(norm_all), None
            else:
                xs, y, norm, used, wt = xk, y_all[:, kept], norm_all[:, kept], w, w[..., None].double()
            cols.append(mean_pair_cosine(xs, norm, used)[:, None])
            y = y.double()
            y2 = y * y
            cols += [_token_mean(m, wt) for m in (y, y2, y2 * y, y2 * y2)]
        self._rows.append(torch.cat(cols, dim=1))

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        w = kept_weights(batch, tensors, self.ctx.kept)
        self._depth(i, tensors["input"], batch, w)
        if i == self.ctx.layers - 1:
            self._depth(self.depths - 1, tensors["output"], batch, w)
            self.boot_.update(torch.cat(self._rows, dim=1), batch.weights)
            self._rows = []

    def merge(self, other: E3Gaussianity) -> E3Gaussianity:
        for mine, theirs in zip(self.kept_ + self.special_, other.kept_ + other.special_, strict=True):
            mine.merge(theirs)
        self.massive_ = [a + b for a, b in zip(self.massive_, other.massive_, strict=True)]
        self.boot_.merge(other.boot_)
        return self

    def _shape_stats(self, m: Tensor) -> Tensor:
        m = m.view(*m.shape[:-1], self.depths, len(VARIANTS), 1 + 4 * DIRECTIONS)
        aniso = m[..., 0]
        m1, m2, m3, m4 = m[..., 1:].unflatten(-1, (4, DIRECTIONS)).unbind(-2)
        var = m2 - m1**2
        c3 = m3 - 3 * m1 * m2 + 2 * m1**3
        c4 = m4 - 4 * m1 * m3 + 6 * m1**2 * m2 - 3 * m1**4
        kurt = (c4 / var**2 - 3).abs().mean(-1)
        skew = (c3 / var**1.5).abs().mean(-1)
        return torch.stack([kurt, skew, aniso], dim=-1)  # (..., depth, V, 3)

    @staticmethod
    def _isotropy(moments: Moments) -> tuple[float, float]:
        eig = torch.linalg.eigvalsh(moments.covariance_).clamp_min(0)
        pr = float(eig.sum() ** 2 / (eig.pow(2).sum() * eig.numel()))
        return pr, float(eig[-1] / eig.sum())

    def result(self, out_dir: Path | None) -> Record:
        est, lo, hi = (t.numpy() for t in self.boot_.interval(self._shape_stats))
        v = VARIANTS.index("excl")
        alls = [
            Moments(self.ctx.dim, True, self.directions).merge(a).merge(b)
            for a, b in zip(self.kept_, self.special_, strict=True)
        ]
        iso = {"excl": [self._isotropy(m) for m in self.kept_], "all": [self._isotropy(m) for m in alls]}
        n = self.kept_[0].n_
        details: dict = {
            "tensors": "layers.i.input for i = 0..L-1 (depth 0 = embeddings) and layers.(L-1).output",
            "directions": DIRECTIONS,
            "massive_tokens_left_out": self.massive_,
            "massive_factor": MASSIVE_FACTOR,
            "exact_mean_abs_kurtosis_excl": as_list([m.excess_kurtosis_().abs().mean() for m in self.kept_]),
            "exact_mean_abs_kurtosis_all": as_list([m.excess_kurtosis_().abs().mean() for m in alls]),
            "null_mean_abs_kurtosis": float(np.sqrt(24 / n) * np.sqrt(2 / np.pi)),
            "null_participation_ratio_isotropic": float(1 / (1 + self.ctx.dim / n)),
        }
        for vi, variant in enumerate(VARIANTS):
            for k, name in enumerate(("mean_abs_kurtosis", "mean_abs_skewness", "anisotropy")):
                details[f"{name}_{variant}"] = {
                    "estimate": as_list(est[:, vi, k]),
                    "low": as_list(lo[:, vi, k]),
                    "high": as_list(hi[:, vi, k]),
                }
            details[f"participation_ratio_{variant}"] = [round(p, 6) for p, _ in iso[variant]]
            details[f"top_eigen_share_{variant}"] = [round(t, 6) for _, t in iso[variant]]
        close = (est[:, v, 0] < KURTOSIS_LIMIT) & (est[:, v, 1] < SKEW_LIMIT)
        far = lo[:, v, 0] > KURTOSIS_LIMIT
        verdict = (
            "supported"
            if close.sum() > self.depths / 2
            else "not_supported"
            if far.sum() > self.depths / 2
            else "inconclusive"
        )
        metrics = {
            "depths_close_to_gaussian": int(close.sum()),
            "depths_far_from_gaussian": int(far.sum()),
            "depths": self.depths,
            "median_abs_kurtosis_excl": float(np.median(est[:, v, 0])),
            "median_abs_kurtosis_all": float(np.median(est[:, 0, 0])),
            "median_participation_ratio_excl": float(np.median([p for p, _ in iso["excl"]])),
            "median_anisotropy_excl": float(np.median(est[:, v, 2])),
            "tokens_excl": n,
            "massive_tokens_left_out_max": max(self.massive_),
        }
        fig, axes = figure(out_dir, ncols=3, width=4.2)
        if fig is not None:
            x = np.arange(self.depths)
            for vi, variant in enumerate(VARIANTS):
                band(axes[0], x, est[:, vi, 0], lo[:, vi, 0], hi[:, vi, 0], f"|excess kurtosis|, {variant}")
                band(axes[0], x, est[:, vi, 1], lo[:, vi, 1], hi[:, vi, 1], f"|skewness|, {variant}", ls="--")
                axes[1].plot(x, [p for p, _ in iso[variant]], marker="o", ms=3, label=f"participation ratio, {variant}")
                band(axes[2], x, est[:, vi, 2], lo[:, vi, 2], hi[:, vi, 2], f"{variant} tokens")
            axes[0].axhline(details["null_mean_abs_kurtosis"], color="k", lw=0.8, label="null: Gaussian")
            axes[0].set_yscale("log")
            axes[1].axhline(details["null_participation_ratio_isotropic"], color="k", lw=0.8, label="null: isotropic")
            axes[2].axhline(0, color="k", lw=0.8, label="null: isotropic")
            for ax, title in zip(
                axes, ("Gaussianity (random projections)", "isotropy", "anisotropy (mean cosine)"), strict=True
            ):
                ax.set(xlabel="depth (0 = embeddings)", title=f"E3 {self.ctx.model_name}: {title}")
                ax.legend(fontsize=6)
        return Record(
            id="E3",
            kind="empirical",
            verdict=verdict,
            metrics=metrics,
            method=(
                f"moments along {DIRECTIONS} random directions, covariance spectrum, "
                "mean cosine over token pairs within sequences; Poisson bootstrap"
            ),
            notes=(
                f"verdict without first/special tokens and massive-activation tokens (norm > {MASSIVE_FACTOR:g}x the "
                f"sequence's median; up to {max(self.massive_)} per depth): close = mean|kurtosis| < {KURTOSIS_LIMIT} "
                f"and mean|skew| < {SKEW_LIMIT}"
            ),
            details=details,
            plots=save(fig, out_dir, f"{self.ctx.slug}_e3_gaussianity.png"),
        )
