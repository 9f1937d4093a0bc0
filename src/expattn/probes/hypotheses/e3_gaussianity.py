r"""E3: how far from Gaussian and from isotropic are the hidden states, layer by layer?

Along $K$ fixed random unit directions $u_k$ (the same for every layer), with $y = u_k^\top x$:

$$\text{skew}_k = \frac{E(y-\bar y)^3}{\sigma^3},\quad \kappa_k = \frac{E(y-\bar y)^4}{\sigma^4} - 3,\qquad
\text{PR} = \frac{(\operatorname{tr}\Sigma)^2}{D\,\operatorname{tr}\Sigma^2},\qquad
\text{aniso} = E\cos(x_t, x'_{t'})$$

(seed 000 §6: the "useful experiment" of watching the distribution change layer by layer;
Thm. 1 predicts a Gaussian equilibrium). Random directions alone cannot tell a sphere from a
Gaussian in high dimension, so the verdict also reads the radius ratio of ``e3_shape`` (the
distribution of token norms in the cloud's own metric) on up to ``buffer_size(D)`` tokens per depth, with
the principal-direction kurtosis beside it, and the largest single-channel kurtosis over every kept token with
its bootstrap interval (``e3_channels``). Anisotropy as Ethayarajh (2019) defines
it: the mean cosine between tokens of different sequences (contexts); the mean cosine over pairs
of distinct tokens within a sequence is kept under its own name, ``within_sequence_cosine``.
Tensors: ``layers.i.input`` for every block (depth 0 = embeddings) and the last block's ``output``.
Null baseline: a Gaussian with the same number of tokens has $E|\kappa| = \sqrt{24/n}\sqrt{2/\pi}$,
$\text{PR} \approx 1/(1 + D/n)$
if isotropic, and cosine 0.
Reported with all tokens and without the first/special tokens and the massive-activation tokens
(``common.kept_weights``: a token whose state is over 20 times the sequence's median norm; in
SmolLM2 a word right after the first token now and then). Criterion (without them, per depth,
``e3_shape.close_and_far``): close to Gaussian when mean $|\kappa| < 1$, mean $|\text{skew}| < 0.5$ and
the radius ratio lies in ``RADIUS_BAND``; far when the interval of mean $|\kappa|$ lies above 1 or the
radius ratio outside the band; supported when most depths are close, not supported when most are far, and
inconclusive when the count's bootstrap interval reaches half the depths (``base.majority_verdict``: the count per
replicate of the kurtosis and skewness; the radius ratio, read once on the buffer, is fixed).
Controls through the same rule, on synthetic clouds of the same size and width: a Gaussian
(positive), points on a sphere and a Student t (negative).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from jaxtyping import Bool, Float
from torch import Tensor

from expattn.probes.hypotheses.base import (
    MASSIVE_FACTOR,
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
from expattn.probes.hypotheses.e3_channels import ChannelKurtosis
from expattn.probes.hypotheses.e3_shape import (
    KURTOSIS_LIMIT,
    RADIUS_BAND,
    SKEW_LIMIT,
    SPHERE_POWER,
    buffer_size,
    close_and_far,
    cloud_bytes,
    cloud_shapes,
    control_clouds,
    direction_moments,
    isotropy,
    radius_ratio,
    spectrum,
    sphere_power,
)
from expattn.probes.hypotheses.massive import MassiveActivations
from expattn.probes.hypotheses.published import ethayarajh_2019, sun_2024
from expattn.probes.sizes import Sizes, bootstrap_bytes
from expattn.probes.statistics.batches import batches, per_batch
from expattn.probes.statistics.stats import BootstrapMeans, Moments, covariance_stack
from expattn.results.record import Control

DIRECTIONS = 32
ISOTROPY_MATRICES = 10  # (D, D) float64 per depth in ``_isotropy``: 2 covariances, a scatter, the solver's copies


def _token_mean(v: Tensor, w: Tensor | None) -> Tensor:
    """Mean over the token axis (dim 1) of ``v``, weighted by ``w`` (broadcasting to ``v``) unless ``None``."""
    return v.mean(1) if w is None else (v * w).sum(1) / w.sum(1)


def mean_pair_cosine(
    x: Float[Tensor, "batch token dim"], norm: Float[Tensor, "batch token"], w: Float[Tensor, "batch token"]
) -> Float[Tensor, " batch"]:
    r"""Per sequence, the mean cosine over all pairs of distinct used tokens, ``(batch,)`` float64:

    $$\frac{\sum_{s\ne t} w_s w_t \cos(x_s, x_t)}{\sum_{s\ne t} w_s w_t}
    = \frac{\lVert \sum_t w_t \hat x_t\rVert^2 - \sum_t w_t^2 \lVert\hat x_t\rVert^2}{(\sum_t w_t)^2 - \sum_t w_t^2},
    \qquad \hat x_t = x_t / \max(\lVert x_t\rVert, 10^{-8})$$

    the expectation of the cosine between two tokens drawn at random (Ethayarajh 2019), over every pair
    at once: one weighted sum of the tokens, no pairing. ``x`` ``(batch, token, D)``, ``norm`` its
    per-token norms ``(batch, token)`` and ``w`` ``(batch, token)`` token weights (1 = use, 0 = leave out)."""
    c = w / norm.clamp_min(1e-8)  # (B, T)
    total = torch.bmm(c.unsqueeze(1), x).squeeze(1).double()  # (B, D): sum_t w_t x_t / |x_t|
    diagonal = (c * norm).double().pow(2).sum(1)
    weights = w.double().sum(1)
    return (total.pow(2).sum(1) - diagonal) / (weights.pow(2) - w.double().pow(2).sum(1))


def kept_moments(
    x: Float[Tensor, "batch token dim"],
    kept: slice | Bool[Tensor, " token"],
    keep: Bool[Tensor, "batch kept"],
    directions: Float[Tensor, "dim k"] | None = None,
    projections: Float[Tensor, "batch token k"] | None = None,
) -> Moments:
    """Count, mean, scatter (and projected moments) of the tokens of ``x[:, kept]`` (``x`` ``(B, T, D)``) where
    ``keep`` ``(B, kept)`` is True: the ``"excl"`` tokens of a block, shared by E3 and E4 (on post-LN models both
    read ``input``). ``kept``: a slice or a ``(T,)`` boolean mask (``ProbeContext.kept``); ``directions``
    ``(D, K)``; ``projections`` ``(B, T, K)``: ``x @ directions`` if already computed."""
    xs, ys = x[:, kept], None if projections is None else projections[:, kept]
    if not bool(keep.all()):  # a massive token: masked copies (otherwise the views are read in place)
        xs, ys = xs[keep], None if ys is None else ys[keep]
    return Moments.of(xs, True, directions, ys)


class E3Gaussianity(Estimator):
    """Streaming E3 estimator. Fitted: ``kept_``/``special_`` (per depth ``Moments``), ``boot_`` (BootstrapMeans)."""

    claim = "E3"
    tensors = ("input", "output")
    method = (
        f"moments along {DIRECTIONS} random directions, radius ratio of Mahalanobis norms, covariance "
        "spectrum, mean cosine of tokens across and within sequences; Poisson bootstrap"
    )
    criterion = (
        f"per depth, close iff mean|excess kurtosis| < {KURTOSIS_LIMIT} and mean|skewness| < "
        f"{SKEW_LIMIT} along {DIRECTIONS} random directions and the radius ratio lies in {RADIUS_BAND}; far iff "
        "the kurtosis interval lies above its limit or the radius ratio outside the band; supported iff most "
        "depths are close, not_supported iff most are far, else inconclusive, as is a majority whose count's 95% "
        "bootstrap interval (the kurtosis and skewness per replicate) reaches half the depths. Synthetic sphere "
        "and Student-t clouds of the same size must not be supported; a Gaussian one must"
    )

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Per depth: the scatter of the kept and of the set-aside tokens (with their means and projected
        moments), bootstrap sums of the projected moments, the radius ratio's float32 token buffer, the
        cross-sequence cosine sums and the per-channel moments with their bootstrap sums (``ChannelKurtosis``);
        the random directions in float64 and float32."""
        d, depths = n.hidden, n.depths
        moments = 8 * d + 4 * 8 * DIRECTIONS  # Moments without its scatter: mean (D,), projected sums (K,) x 4
        return (12 * d * DIRECTIONS + 2 * depths * (n.big + moments)
                + bootstrap_bytes(depths * len(VARIANTS) * (1 + 4 * DIRECTIONS), n.replicates)
                + 4 * depths * min(buffer_size(d), n.tokens) * d + 8 * depths * (d + 3)
                + ChannelKurtosis.statistics_bytes(depths, d, n.replicates))

    @staticmethod
    def analysis_bytes(n: Sizes) -> int:
        r"""Beside the statistics while ``measure`` runs, one batch of depths at a time (``statistics.batches``): the
        radius ratio's float64 clouds of $n \le$ ``buffer_size(D)`` tokens (centred, whitened, their coordinates'
        powers) with their eigenvectors (``cloud_bytes`` each), or the float64 covariances, merged scatters and
        the top-eigenvalue solver's copies (``ISOTROPY_MATRICES`` $D^2$ float64 entries each)."""
        d, m = n.hidden, min(buffer_size(n.hidden), n.tokens)
        return max(each * per_batch(n.depths, each) for each in (cloud_bytes(m, d), 8 * ISOTROPY_MATRICES * d * d))

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        gen = torch.Generator().manual_seed(ctx.seed + 3)
        u = torch.randn(ctx.dim, DIRECTIONS, generator=gen, dtype=torch.float64)
        self.directions = u / u.norm(dim=0)
        self._directions32 = self.directions.float()
        self.depths = ctx.layers + 1
        self.kept_ = [Moments(ctx.dim, True, self.directions, ctx.statistics) for _ in range(self.depths)]
        self.special_ = [Moments(ctx.dim, True, self.directions, ctx.statistics) for _ in range(self.depths)]
        self.massive_ = [0] * self.depths  # tokens left out of "excl" as massive activations, per depth
        self.activations_ = MassiveActivations(self.depths)  # Sun et al. 2024's massive entries
        # per depth and variant: anisotropy, then raw moments 1..4 of each projection
        self._f = len(VARIANTS) * (1 + 4 * DIRECTIONS)
        self.boot_ = BootstrapMeans(self.depths * self._f, ctx.replicates)
        self._rows: list[Tensor] = []
        # up to buffer_size(D) kept tokens per depth
        self.buffer_: list[list[Tensor]] = [[] for _ in range(self.depths)]
        # per depth, over kept tokens of all sequences: sum of unit vectors, sum over sequences of |their sum|^2,
        # token count, sum over sequences of count^2 (cross-context cosine, Ethayarajh 2019)
        self.context_ = torch.zeros(self.depths, ctx.dim + 3, dtype=torch.float64)
        self.channels_ = ChannelKurtosis(self.depths, ctx.dim, ctx.replicates)  # every kept token, per channel

    def _depth(self, d: int, x: Tensor, batch: Batch, w: Tensor) -> None:
        """Statistics of depth ``d`` from ``x`` ``(B, T, D)``; ``w`` ``(B, kept)`` the block's token weights."""
        kept, keep = self.ctx.kept, w.bool()
        self.activations_.update(d, x, batch.index)
        if self._directions32.device != x.device:  # the statistics live on the data's device
            self._directions32 = self._directions32.to(x.device)
            self.context_ = self.context_.to(x.device)
        y_all = x @ self._directions32  # (B, T, K), float32 projections; moments in float64 below
        moments = shared(batch, "moments kept", x, lambda t: kept_moments(t, kept, keep, self.directions, y_all))
        self.kept_[d].merge(moments)
        xk = x[:, kept]
        self.special_[d].update(torch.cat([x[:, self.ctx.excluded].flatten(0, 1), xk[~keep]]))
        self.massive_[d] = self.massive_[d] + (~keep).sum()  # a count on the data's device (read in measure)
        self.channels_.update(d, xk, w, batch.weights)
        norm_all = shared(batch, "squared norms", x, squared_norms).sqrt().float()  # (B, T), computed once
        room = buffer_size(self.ctx.dim) - sum(len(b) for b in self.buffer_[d])
        if room > 0:
            self.buffer_[d].append(xk[keep][:room].float().clone())
        unit = torch.bmm((w / norm_all[:, kept].clamp_min(1e-8)).unsqueeze(1), xk).squeeze(1).double()  # (B, D)
        counts = w.double().sum(1)
        self.context_[d, :-3] += unit.sum(0)
        self.context_[d, -3:] += torch.stack([unit.pow(2).sum(), counts.sum(), counts.pow(2).sum()])
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

    def _massive(self) -> list[int]:
        """``massive_`` as Python ints (counts accumulate on the data's device during the pass: read in one go)."""
        read = iter(torch.stack([m for m in self.massive_ if isinstance(m, Tensor)] or [torch.zeros(0)]).tolist())
        self.massive_ = [int(next(read)) if isinstance(m, Tensor) else int(m) for m in self.massive_]
        return self.massive_

    def merge(self, other: E3Gaussianity) -> E3Gaussianity:
        for mine, theirs in zip(self.kept_ + self.special_, other.kept_ + other.special_, strict=True):
            mine.merge(theirs)
        self.massive_ = [a + b for a, b in zip(self._massive(), other._massive(), strict=True)]
        self.activations_.merge(other.activations_)
        room = buffer_size(self.ctx.dim)
        self.buffer_ = [[torch.cat(a + b)[:room]] for a, b in zip(self.buffer_, other.buffer_, strict=True)]
        self.context_ += other.context_.to(self.context_.device)
        self.channels_.merge(other.channels_)
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

    def _isotropy(self) -> tuple[Tensor, Tensor]:
        """Per variant (``excl``: the kept tokens, ``all``: with the set-aside ones merged in) and depth, the
        participation ratio and top eigenvalue share (``e3_shape.isotropy``) ``(2, depth, 2)``, and the exact mean
        |excess kurtosis| over all tokens ``(depth,)``: the covariances of a batch of depths in one call."""
        gen = torch.Generator().manual_seed(self.ctx.seed + 3)
        out, kurtosis = [], []
        for depths in batches(self.depths, 8 * ISOTROPY_MATRICES * self.ctx.dim**2, self.context_.device):
            merged = [Moments(self.ctx.dim, True, self.directions).merge(self.kept_[d]).merge(self.special_[d])
                      for d in depths]
            kurtosis += [m.excess_kurtosis_(check=False).abs().mean() for m in merged]
            covariances = covariance_stack([self.kept_[d] for d in depths] + merged)
            del merged
            out.append(isotropy(covariances, gen).unflatten(0, (2, len(depths))))
        return torch.cat(out, 1), torch.stack(kurtosis)

    def _cross_context_cosine(self) -> np.ndarray:
        """Per depth: mean cosine over pairs of kept tokens from different sequences."""
        c = self.context_
        pairs = c[:, -2].pow(2) - c[:, -1]
        return ((c[:, :-3].pow(2).sum(1) - c[:, -3]) / pairs.clamp_min(1)).cpu().numpy()

    def _controls(self, n: int) -> list[Control]:
        controls = []
        for name, (kind, cloud) in control_clouds(n, self.ctx.dim, self.ctx.seed + 33).items():
            kurt, skew = direction_moments(cloud, self.directions)
            rho = float(radius_ratio(spectrum(cloud)))
            close, far = close_and_far(*(torch.tensor([v]) for v in (kurt, skew, rho, kurt)))
            verdict = "supported" if close.all() else "not_supported" if far.all() else "inconclusive"
            controls.append(Control(f"{name}, {n} tokens", kind, verdict,
                                    {"mean_abs_kurtosis": kurt, "mean_abs_skewness": skew, "radius_ratio": rho}))
        return controls

    def measure(self) -> Measured:
        self._massive()
        est, lo, hi = (t.cpu().numpy() for t in self.boot_.interval(self._shape_stats))
        reps = self.boot_.replicates(self._shape_stats).cpu().numpy()  # (R, depth, V, 3)
        clouds, buffered = cloud_shapes(self.buffer_, self.ctx.dim, self.context_.device)
        iso_all, kurtosis_all = self._isotropy()
        kurtosis_excl = torch.stack([m.excess_kurtosis_(check=False).abs().mean() for m in self.kept_])
        (rho, principal), (pr, share), kurtosis, (channel, channel_lo, channel_hi) = (t.cpu().numpy() for t in (
            clouds, iso_all.permute(2, 0, 1), torch.stack([kurtosis_excl, kurtosis_all]),
            torch.stack(self.channels_.largest())))  # one read each
        top = int(np.nanargmax(channel))
        cross = self._cross_context_cosine()
        v = VARIANTS.index("excl")
        iso = {variant: list(zip(pr[k], share[k], strict=True)) for k, variant in enumerate(("excl", "all"))}
        n = self.kept_[0].n_
        details: dict = {
            "tensors": "layers.i.input for i = 0..L-1 (depth 0 = embeddings) and layers.(L-1).output",
            "directions": DIRECTIONS,
            "massive_tokens_left_out": self.massive_,
            "massive_factor": MASSIVE_FACTOR,
            "exact_mean_abs_kurtosis_excl": as_list(kurtosis[0]),
            "exact_mean_abs_kurtosis_all": as_list(kurtosis[1]),
            "null_mean_abs_kurtosis": float(np.sqrt(24 / n) * np.sqrt(2 / np.pi)),
            "null_participation_ratio_isotropic": float(1 / (1 + self.ctx.dim / n)),
            "radius_ratio_excl": as_list(rho),
            "radius_ratio_tokens": buffered,
            "max_abs_coordinate_kurtosis_excl": {"estimate": as_list(channel), "low": as_list(channel_lo),
                                                 "high": as_list(channel_hi), "tokens": "every kept token"},
            "principal_direction_kurtosis_excl": as_list(principal),
            "anisotropy_cross_context_excl": as_list(cross),
            "massive_activations": self.activations_.summary(self.ctx.token_text),
        }
        for vi, variant in enumerate(VARIANTS):
            for k, name in enumerate(("mean_abs_kurtosis", "mean_abs_skewness", "within_sequence_cosine")):
                details[f"{name}_{variant}"] = {
                    "estimate": as_list(est[:, vi, k]),
                    "low": as_list(lo[:, vi, k]),
                    "high": as_list(hi[:, vi, k]),
                }
            details[f"participation_ratio_{variant}"] = [round(float(p), 6) for p, _ in iso[variant]]
            details[f"top_eigen_share_{variant}"] = [round(float(t), 6) for _, t in iso[variant]]
        metrics = {
            "depths": self.depths,
            "median_abs_kurtosis_excl": float(np.median(est[:, v, 0])),
            "median_abs_kurtosis_all": float(np.median(est[:, 0, 0])),
            "median_participation_ratio_excl": float(np.median(pr[0])),
            "median_radius_ratio_excl": float(np.nanmedian(rho)) if np.isfinite(rho).any() else float("nan"),
            "max_abs_coordinate_kurtosis_excl": float(channel[top]),
            "max_abs_coordinate_kurtosis_excl_interval": [float(channel_lo[top]), float(channel_hi[top])],
            "median_anisotropy_cross_context_excl": float(np.median(cross)),
            "median_within_sequence_cosine_excl": float(np.median(est[:, v, 2])),
            "tokens_excl": n,
            "massive_tokens_left_out_max": max(self.massive_),
        }
        details["published"] = [sun_2024(details["massive_activations"]), ethayarajh_2019(cross)]
        arrays = {"est": est, "lo": lo, "hi": hi, "reps": reps, "rho": rho, "cross": cross,
                  "participation": {k: pr[i] for i, k in enumerate(("excl", "all"))},
                  "buffered": np.array(buffered)}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a = measured.arrays
        est, lo, hi, v = a["est"], a["lo"], a["hi"], VARIANTS.index("excl")
        close, far = (t.numpy() for t in close_and_far(*(torch.as_tensor(x) for x in (
            est[:, v, 0], est[:, v, 1], a["rho"], lo[:, v, 0]))))
        reps = a["reps"][..., v, :]  # (R, depth, 3)
        lo_rep = replicate_intervals(est[:, v, 0], lo[:, v, 0], hi[:, v, 0], reps[..., 0])[0]  # (R, depth)
        close_rep, far_rep = (t.numpy() for t in close_and_far(*(torch.as_tensor(x) for x in (
            reps[..., 0], reps[..., 1], a["rho"], lo_rep))))
        verdict = majority_verdict(close, far, close_rep, far_rep)
        notes = (
            f"verdict without first/special tokens and massive-activation tokens (norm > {MASSIVE_FACTOR:g}x the "
            f"sequence's median; up to {max(self.massive_)} per depth): close = mean|kurtosis| < {KURTOSIS_LIMIT} "
            f"and mean|skew| < {SKEW_LIMIT} and radius ratio in {RADIUS_BAND}"
        )
        n = max(int(a["buffered"][0]), 8)
        if not sphere_power(n, self.ctx.dim):
            notes += (f"; with {n} tokens for width {self.ctx.dim} the radius ratio cannot tell points on a sphere "
                      f"(ratio about p/n = {self.ctx.dim / n:.2f}) from a Gaussian (p/n must be <= {SPHERE_POWER:g}): "
                      "probe more tokens")
        metrics = {"depths_close_to_gaussian": int(close.sum()), "depths_far_from_gaussian": int(far.sum()),
                   "depths_close_interval": count_interval(close_rep), "depths_far_interval": count_interval(far_rep)}
        return Judgement(verdict, self._controls(n), notes, metrics)

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir, ncols=3, width=4.2)
        if fig is None:
            return []
        a, details = measured.arrays, measured.details
        est, lo, hi, x = a["est"], a["lo"], a["hi"], np.arange(self.depths)
        for vi, variant in enumerate(VARIANTS):
            band(axes[0], x, est[:, vi, 0], lo[:, vi, 0], hi[:, vi, 0], f"|excess kurtosis|, {variant}")
            band(axes[0], x, est[:, vi, 1], lo[:, vi, 1], hi[:, vi, 1], f"|skewness|, {variant}", ls="--")
            axes[1].plot(x, a["participation"][variant], marker="o", ms=3, label=f"participation ratio, {variant}")
            band(axes[2], x, est[:, vi, 2], lo[:, vi, 2], hi[:, vi, 2], f"within sequence, {variant} tokens")
        axes[0].axhline(details["null_mean_abs_kurtosis"], color="k", lw=0.8, label="null: Gaussian")
        axes[0].set_yscale("log")
        axes[1].axhline(details["null_participation_ratio_isotropic"], color="k", lw=0.8, label="null: isotropic")
        axes[2].plot(x, a["cross"], marker="s", ms=3, label="across contexts (Ethayarajh), excl")
        axes[2].axhline(0, color="k", lw=0.8, label="null: isotropic")
        for ax, title in zip(
            axes, ("Gaussianity (random projections)", "isotropy", "mean cosine of token pairs"), strict=True
        ):
            ax.set(xlabel="depth (0 = embeddings)", title=f"E3 {self.ctx.title_name}: {title}")
            ax.legend(fontsize=6)
        return save(fig, out_dir, f"{self.ctx.slug}_e3_gaussianity.png")
