r"""Statistics of a cloud of points ``(batch, token, dim)``, one number (or vector) per cloud.

Spread: $\operatorname{tr}\bar S$, $\log\det\bar S$, the entropy of the fitted Gaussian
$\tfrac12\log\det(2\pi e\,\bar S)$, the diameter, the mean distance to the centroid.
Shape: effective rank $\exp H(\sigma/\sum\sigma)$ and stable rank $\lVert X\rVert_F^2/\lVert X\rVert_2^2$
of the centred cloud, mean pairwise cosine. Gaussianity: Mardia's multivariate skewness and
kurtosis with their asymptotic tests, and a sliced Wasserstein distance to the fitted Gaussian
calibrated against same-size Gaussian samples (claims B2-B6). $\bar S$ is normalised by $T$.

Every statistic is computed on the cloud divided by a power of two near its largest entry (``scaled``) and scaled
back, which is exact: a cloud of size 1e20 gives its shape statistics, diameter and distances in float32 although
its squares (1e40) overflow; a statistic that is itself not representable (its $\operatorname{tr}\bar S$) raises
``ValueError`` instead of returning infinity.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from jaxtyping import Float
from scipy import stats
from torch import Tensor

from expattn.arguments import integer
from expattn.core.validate import as_tensor, check_finite, check_ndim, check_output, exact_scale
from expattn.validation import validate_enabled

CHUNK = 2048


def check_cloud(x: Tensor, name: str = "cloud") -> Tensor:
    """A finite floating tensor ``(batch, token, dim)``."""
    as_tensor(name, x)
    check_ndim(name, x, 3, "(batch, token, dim)")
    if x.shape[-2] < 2:
        raise ValueError(f"{name} needs at least 2 tokens, got {x.shape[-2]}")
    return check_finite(name, x)


def scaled(x: Float[Tensor, "batch token dim"]) -> tuple[Float[Tensor, "batch token dim"], Float[Tensor, " batch"]]:
    r"""``(x / s, s)`` for a checked cloud, $s$ the power of two below $\max|x|$ per cloud (``exact_scale``).

    A statistic of degree $k$ is $s^k$ times that of ``x / s`` (exactly: the division is), whose squares and
    products cannot overflow.
    """
    scale = exact_scale(check_cloud(x), (-2, -1))  # (B, 1, 1)
    return x / scale, scale[:, 0, 0]


def _representable(name: str, value: Tensor) -> Tensor:
    """``value`` scaled back from a finite computation: ``ValueError`` (when validating) if it overflows."""
    if validate_enabled():
        cause = f"the statistic overflows {value.dtype}; scale the cloud down (or compute in a wider dtype)"
        check_output(name, value, cause)
    return value


def _centred(y: Tensor) -> Tensor:
    return y - y.mean(-2, keepdim=True)


def centroid(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch dim"]:
    r"""$\bar x = \frac1T \sum_t x_t$."""
    y, scale = scaled(x)
    return y.mean(-2) * scale[:, None]


def mean_norm(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\lVert \bar x \rVert$."""
    y, scale = scaled(x)
    return _representable("mean_norm", y.mean(-2).norm(dim=-1) * scale)


def _covariance(y: Tensor) -> Tensor:
    centred = _centred(y)
    return centred.mT @ centred / y.shape[-2]  # (B, D, D)


def covariance(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch dim dim"]:
    r"""$\bar S = \frac1T \sum_t (x_t - \bar x)(x_t - \bar x)^\top$."""
    y, scale = scaled(x)
    return _representable("covariance", _covariance(y) * scale[:, None, None] ** 2)


def trace_cov(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\operatorname{tr}\bar S$: the mean squared distance to the centroid."""
    y, scale = scaled(x)
    return _representable("trace_cov", _centred(y).square().sum(-1).mean(-1) * scale**2)


def logdet_cov(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\log\det\bar S = \log\det \bar S(x / s) + 2D\log s$ ($-\infty$ for a degenerate cloud)."""
    y, scale = scaled(x)
    return torch.linalg.slogdet(_covariance(y))[1] + 2 * x.shape[-1] * torch.log(scale)


def gaussian_entropy(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""Entropy of the fitted Gaussian, $\tfrac12 \log\det(2\pi e\, \bar S)$."""
    d = x.shape[-1]
    return 0.5 * (logdet_cov(x) + d * math.log(2 * math.pi * math.e))


def diameter(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\max_{s,t} \lVert x_s - x_t \rVert$ (exact, in chunks of tokens)."""
    y, scale = scaled(x)
    best = y.new_zeros(y.shape[0])
    for start in range(0, y.shape[-2], CHUNK):
        # Direct differences, not the |a|^2 + |b|^2 - 2ab shortcut, whose cancellation breaks B2's exact check.
        block = torch.cdist(y[:, start : start + CHUNK], y, compute_mode="donot_use_mm_for_euclid_dist")
        best = torch.maximum(best, block.flatten(1).amax(-1))
    return _representable("diameter", best * scale)


def mean_distance_to_centroid(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\frac1T \sum_t \lVert x_t - \bar x \rVert$."""
    y, scale = scaled(x)
    return _representable("mean_distance_to_centroid", _centred(y).norm(dim=-1).mean(-1) * scale)


def _centred_singular_values(x: Tensor) -> Tensor:
    """Singular values of the centred ``x / s`` (``scaled``): what the scale-free ranks need."""
    return torch.linalg.svdvals(_centred(scaled(x)[0]))  # (B, min(T, D))


def effective_rank(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\exp(-\sum_i p_i \log p_i)$, $p_i = \sigma_i / \sum_j \sigma_j$ of the centred cloud (0 for a point)."""
    sv = _centred_singular_values(x)
    total = sv.sum(-1, keepdim=True)
    p = sv / total.clamp_min(torch.finfo(x.dtype).tiny)
    entropy = -(p * torch.log(p.clamp_min(torch.finfo(x.dtype).tiny))).sum(-1)
    return torch.where(total.squeeze(-1) > 0, entropy.exp(), torch.zeros_like(entropy))


def stable_rank(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\sum_i \sigma_i^2 / \sigma_1^2$ of the centred cloud (0 for a point)."""
    sv = _centred_singular_values(x)
    top = sv[..., 0].square()
    return torch.where(top > 0, sv.square().sum(-1) / top.clamp_min(torch.finfo(x.dtype).tiny), torch.zeros_like(top))


def mean_pairwise_cosine(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\frac{1}{T(T-1)}\sum_{s\ne t} \cos(x_s, x_t) = (\lVert\sum_t u_t\rVert^2 - T)/(T(T-1))$.

    Here $u_t = x_t/\lVert x_t\rVert$; a zero token raises ``ValueError``.
    """
    y = scaled(x)[0]
    tokens = y.shape[-2]
    norms = y.norm(dim=-1, keepdim=True)
    if (norms == 0).any():
        raise ValueError("cloud holds a zero vector; its cosine with other tokens is undefined")
    total = (y / norms).sum(-2).square().sum(-1)
    return (total - tokens) / (tokens * (tokens - 1))


class DegenerateCloud(ValueError):
    """A cloud whose covariance is numerically rank-deficient (see ``conditioning``)."""


def conditioning(x: Float[Tensor, "batch token dim"]) -> Float[Tensor, " batch"]:
    r"""$\lambda_{\min}(\bar S) / \lambda_{\max}(\bar S)$, the covariance's inverse condition number (0 for a point).

    A cloud is **numerically rank-deficient** when this is below ``rank_tolerance(dtype)``.
    """
    return _conditioning(scaled(x)[0])


def _conditioning(y: Tensor) -> Tensor:
    eig = torch.linalg.eigvalsh(_covariance(y))  # (B, D), ascending; scale-free
    top = eig[..., -1]
    ratio = eig[..., 0].clamp_min(0) / top.clamp_min(torch.finfo(y.dtype).tiny)
    return torch.where(top > 0, ratio, torch.zeros_like(top))


def rank_tolerance(dtype: torch.dtype) -> float:
    r"""$\sqrt{\epsilon}$ of ``dtype`` (1.5e-8 in float64, 3.5e-4 in float32): the smallest eigenvalue ratio of a
    covariance read as full rank.

    $\bar S$ is known to about $\epsilon\,\lambda_{\max}$; standardising multiplies the direction of
    $\lambda_{\min}$ by $\lambda_{\min}^{-1/2}$, so below $\lambda_{\min}/\lambda_{\max} = \sqrt{\epsilon}$ the
    standardised coordinates would carry relative rounding error above $\sqrt{\epsilon}$, and whether a Cholesky
    factorisation succeeds at all is decided by rounding (machine and subset dependent). The decision is made here,
    explicitly, instead.
    """
    return math.sqrt(torch.finfo(dtype).eps)


def standardised(x: Tensor) -> Tensor:
    """$\\bar S^{-1/2}(x_t - \\bar x)$ through a Cholesky factor (of ``x / s``: the result is scale-free).

    Raises:
        DegenerateCloud: a cloud is numerically rank-deficient (``conditioning`` below ``rank_tolerance``).
    """
    y = scaled(x)[0]
    ratio = _conditioning(y)
    if (ratio < rank_tolerance(x.dtype)).any():
        raise DegenerateCloud(
            f"cloud has a numerically singular covariance (eigenvalue ratio {float(ratio.min()):.2g} < "
            f"{rank_tolerance(x.dtype):.2g}); its Gaussianity statistics are undefined"
        )
    chol, info = torch.linalg.cholesky_ex(_covariance(y))
    if (info != 0).any():
        raise DegenerateCloud("cloud has a singular covariance; its Gaussianity statistics are undefined")
    centred = _centred(y)
    return torch.linalg.solve_triangular(chol, centred.mT, upper=False).mT  # (B, T, D)


def mardia(x: Float[Tensor, "batch token dim"]) -> dict[str, Tensor]:
    r"""Mardia's statistics and their asymptotic p-values under normality.

    $b_1 = \frac{1}{T^2}\sum_{s,t} (z_s^\top z_t)^3$, $\;T b_1/6 \sim \chi^2_{D(D+1)(D+2)/6}$;
    $b_2 = \frac1T \sum_t \lVert z_t\rVert^4$, $\;(b_2 - D(D+2))/\sqrt{8D(D+2)/T} \sim N(0,1)$,
    with $z_t = \bar S^{-1/2}(x_t - \bar x)$.

    Returns: ``skewness``, ``kurtosis``, ``skewness_p``, ``kurtosis_p``, each ``(batch,)``.
    """
    z = standardised(x)
    tokens, d = z.shape[-2], z.shape[-1]
    b1 = z.new_zeros(z.shape[0])
    for start in range(0, tokens, CHUNK):
        b1 = b1 + (z[:, start : start + CHUNK] @ z.mT).pow(3).sum((-1, -2))
    b1 = b1 / tokens**2
    b2 = z.square().sum(-1).square().mean(-1)
    dof = d * (d + 1) * (d + 2) / 6
    skew_p = torch.as_tensor(stats.chi2.sf((tokens * b1 / 6).cpu().numpy(), dof), dtype=x.dtype, device=x.device)
    kurt_z = (b2 - d * (d + 2)) / math.sqrt(8 * d * (d + 2) / tokens)
    kurt_p = torch.as_tensor(2 * stats.norm.sf(kurt_z.abs().cpu().numpy()), dtype=x.dtype, device=x.device)
    return {"skewness": b1, "kurtosis": b2, "skewness_p": skew_p, "kurtosis_p": kurt_p}


def _sliced_w2(z: Tensor, directions: Tensor) -> Tensor:
    """RMS over directions of the 1-D Wasserstein-2 distance to N(0, 1) quantiles."""
    tokens = z.shape[-2]
    levels = (torch.arange(tokens, dtype=torch.float64) + 0.5) / tokens
    quantiles = torch.as_tensor(stats.norm.ppf(levels.numpy()), dtype=z.dtype, device=z.device)  # (T,)
    proj = torch.sort(z @ directions.T, dim=-2).values  # (B, T, K)
    return (proj - quantiles[:, None]).square().mean(-2).mean(-1).sqrt()


def sliced_wasserstein_gaussian(
    x: Float[Tensor, "batch token dim"],
    generator: torch.Generator,
    directions: int = 64,
    null_draws: int = 40,
) -> dict[str, Tensor]:
    r"""Sliced Wasserstein-2 distance of the standardised cloud to $N(0, I)$, with a Gaussian null.

    $$\mathrm{SW}(x) = \Big(\tfrac1K\sum_k W_2^2\big(\{u_k^\top z_t\}_t,\, N(0,1)\big)\Big)^{1/2}$$

    over $K$ random unit directions $u_k$, $z_t = \bar S^{-1/2}(x_t - \bar x)$ (so the distance is to
    the fitted Gaussian and invariant to affine maps). The null repeats the statistic on
    ``null_draws`` fresh Gaussian clouds of the same size $T$ and dimension.

    Returns: ``sw``, ``null_mean``, ``null_std``, ``null_q95``, ``p_value`` = $(1 + \#\{\mathrm{null} \ge
    \mathrm{SW}\})/(1 + \text{draws})$, ``z`` = (sw - null_mean) / null_std and ``excess`` = sw / null_mean,
    each ``(batch,)``.
    """
    integer("directions", directions, at_least=1)
    integer("null_draws", null_draws, at_least=2)
    z = standardised(x)
    batch, tokens, d = z.shape
    u = torch.randn(directions, d, generator=generator, dtype=torch.float64).to(z.device, z.dtype)
    u = u / u.norm(dim=-1, keepdim=True)
    sw = _sliced_w2(z, u)
    null_clouds = torch.randn(null_draws, tokens, d, generator=generator, dtype=torch.float64).to(z.device, z.dtype)
    null = _sliced_w2(standardised(null_clouds), u)  # (null_draws,)
    p_value = (1 + (null[None, :] >= sw[:, None]).sum(-1)) / (1 + null_draws)
    ones = torch.ones(batch, dtype=z.dtype, device=z.device)
    return {
        "sw": sw,
        "null_mean": null.mean() * ones,
        "null_std": null.std() * ones,
        "null_q95": torch.quantile(null, 0.95) * ones,
        "z": (sw - null.mean()) / null.std(),
        "p_value": p_value.to(z.dtype),
        "excess": sw / null.mean(),
    }


CloudMetric = Callable[[Tensor], Tensor]
METRICS: dict[str, CloudMetric] = {
    "mean_norm": mean_norm,
    "trace_cov": trace_cov,
    "logdet_cov": logdet_cov,
    "gaussian_entropy": gaussian_entropy,
    "diameter": diameter,
    "mean_distance_to_centroid": mean_distance_to_centroid,
    "effective_rank": effective_rank,
    "stable_rank": stable_rank,
    "mean_pairwise_cosine": mean_pairwise_cosine,
    "mardia_skewness": lambda x: mardia(x)["skewness"],
    "mardia_kurtosis": lambda x: mardia(x)["kurtosis"],
}
