r"""E3's shape statistics on a buffered sample of tokens, and the rule that calls a cloud close to Gaussian.

Radius ratio (the distribution of token norms in the cloud's own metric, a Mardia-type statistic):
with $S$ the sample covariance restricted to its range (rank $p$) and
$d_i = (x_i - \bar x)^\top S^{+} (x_i - \bar x)$,

$$\rho = \frac{\operatorname{Var}(d)}{\operatorname{Var}_{\mathcal N}(d)},\qquad
\operatorname{Var}_{\mathcal N}(d) = \frac{(n-1)^4}{n^2}\,\frac{ab}{(a+b)^2(a+b+1)},$$
$$a = \tfrac p2,\quad b = \tfrac{n-p-1}2,$$

the exact variance for Gaussian samples ($d_i\,n/(n-1)^2 \sim \mathrm{Beta}(a, b)$). It is affine
invariant: $\rho \approx 1$ for any Gaussian, well below 1 for points on a (linearly mapped) sphere,
whose Mahalanobis radii are all equal, and far above 1 for heavy tails (Student t, Laplace). Along
with it: the excess kurtosis along the top principal direction (the largest over single channels is
streamed over every kept token: ``e3_channels``). A depth is close to Gaussian when the mean $|$excess kurtosis$|$ and
$|$skewness$|$ along random directions are below ``KURTOSIS_LIMIT`` and ``SKEW_LIMIT`` and $\rho$ lies
in ``RADIUS_BAND``; far when the kurtosis is above its limit or $\rho$ outside the band. Points on a sphere
give $\rho \approx p/n$, so $\rho$ tells them from a Gaussian only while $p/n$ is at most ``SPHERE_POWER``
(``sphere_power``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from expattn.core.top_eigen import top_eigen
from expattn.probes.statistics.batches import batches

KURTOSIS_LIMIT, SKEW_LIMIT = 1.0, 0.5
RADIUS_BAND = (0.75, 1.33)  # Gaussian clouds of n=1024, p=384-576: rho 1.02-1.06; a sphere 0.4-0.6, Student t5 45+
# A sphere's rho is about p/n (8 draws each at p = 384, 576 and n/p = 1.3-2.7: 0.71-0.77 at p/n = 0.76, 0.53-0.59 at
# 0.56, 0.36-0.39 at 0.38, spread +-0.04): above p/n = 0.6 it comes within that spread of the band's lower edge, and
# whether the rule rejects a sphere is decided by the draw.
SPHERE_POWER = 0.6
BUFFER = 1024  # tokens kept per depth for the radius ratio (float32), at least; wider models keep more


class Spectrum(NamedTuple):
    r"""A cloud centred and its covariance diagonalised, shared by ``radius_ratio`` and ``coordinate_kurtosis``:
    ``centred`` $X - \bar x$ ``(n, D)`` float64, ``eig`` ``(D,)`` ascending eigenvalues and ``vec`` ``(D, D)``
    eigenvectors of $S = (X - \bar x)^\top (X - \bar x) / n$."""

    centred: Float[Tensor, "n dim"]
    eig: Float[Tensor, " dim"]
    vec: Float[Tensor, "dim dim"]


def spectra(xs: list[Float[Tensor, "n dim"]]) -> list[Spectrum]:
    """``Spectrum`` of each cloud ``(n_i, D)`` of ``xs`` (one width, any counts): the covariances decomposed in one
    batched call."""
    centred = [x.double() - x.double().mean(0) for x in xs]
    eig, vec = torch.linalg.eigh(torch.stack([xc.T @ xc / xc.shape[0] for xc in centred]))
    return [Spectrum(xc, e, v) for xc, e, v in zip(centred, eig, vec, strict=True)]


def spectrum(x: Float[Tensor, "n dim"]) -> Spectrum:
    """``Spectrum`` of ``x`` ``(n, D)``: one eigendecomposition for all the shape statistics of a cloud."""
    return spectra([x])[0]


def radius_ratio(cloud: Spectrum) -> Float[Tensor, ""]:
    """$\\rho$ of a cloud (see module), a float64 scalar tensor on the cloud's device (no host read); NaN when
    $n < p + 3$ (too few tokens for the rank). The directions outside the range get weight 0."""
    xc, eig, vec = cloud
    n = xc.shape[0]
    keep = eig > eig.max() * 1e-6
    p = keep.sum().double()
    z = xc @ (vec * torch.where(keep, eig.clamp_min(torch.finfo(eig.dtype).tiny).rsqrt(), 0.0))
    d = (z * z).sum(1)
    a, b = p / 2, (n - p - 1) / 2
    gaussian = (n - 1) ** 4 / n**2 * a * b / ((a + b) ** 2 * (a + b + 1))
    return torch.where(n >= p + 3, d.var(unbiased=False) / gaussian, torch.nan)


def isotropy(covariances: Float[Tensor, "*batch dim dim"], gen: torch.Generator) -> Float[Tensor, "*batch 2"]:
    r"""The participation ratio and the top eigenvalue's share of each covariance $\Sigma$, float64:

    $$\text{PR} = \frac{(\operatorname{tr}\Sigma)^2}{D\,\lVert\Sigma\rVert_F^2},\qquad
    \text{share} = \frac{\theta_1}{\operatorname{tr}\Sigma}$$

    ($\lVert\Sigma\rVert_F^2 = \operatorname{tr}\Sigma^2$: no decomposition), $\theta_1$ from ``core.top_eigen``
    (dense or iterative by the side and the device, its start block drawn from ``gen``; its eigenvalue errs by at most
    the residual, $10^{-5}\lVert\Sigma\rVert_F$, and in practice by its square over the gap). All batched: one call
    for every matrix of ``covariances`` ``(*batch, D, D)``."""
    trace = torch.diagonal(covariances, dim1=-2, dim2=-1).sum(-1)
    ratio = trace.pow(2) / (covariances.pow(2).sum((-2, -1)) * covariances.shape[-1])
    return torch.stack([ratio, top_eigen(covariances, 1, gen).values[..., 0] / trace], -1)


def cloud_bytes(tokens: int, dim: int) -> int:
    """The transient of one depth's cloud in ``cloud_shapes``: ``(tokens, D)`` float64 copies and its spectrum."""
    return 44 * tokens * dim + 16 * dim * dim


def cloud_shapes(buffers: list[list[Float[Tensor, "n dim"]]], dim: int, device: torch.device
                 ) -> tuple[Float[Tensor, "2 depth"], list[int]]:
    """Per depth, from its buffered tokens (``buffers``: per depth, batches of ``(n_i, D)`` tokens on ``device``):
    the radius ratio and the principal-direction kurtosis ``(2, depth)`` float64 on ``device`` (NaN where a depth
    has 3 tokens or fewer), and the number of tokens buffered; the clouds of a batch of depths
    (``statistics.batches``) decomposed in one call, each batch's float64 clouds freed before the next."""
    clouds = [torch.cat(b) if b else torch.zeros(0, dim, device=device) for b in buffers]
    sizes = [len(c) for c in clouds]
    out = torch.full((2, len(clouds)), torch.nan, dtype=torch.float64, device=device)
    for depths in batches(len(clouds), cloud_bytes(max(sizes), dim), device):
        shaped = [d for d in depths if sizes[d] > 3]  # fewer tokens: no covariance of any use
        for d, cloud in zip(shaped, spectra([clouds[d] for d in shaped]) if shaped else [], strict=True):
            out[0, d], out[1, d] = radius_ratio(cloud), principal_kurtosis(cloud)
    return out, sizes


def sphere_power(n: int, p: int) -> bool:
    """Whether ``n`` tokens of rank ``p`` are enough for the radius ratio to tell a sphere (rho about p/n) from a
    Gaussian (rho about 1): ``p / n <= SPHERE_POWER``."""
    return p <= SPHERE_POWER * n


def buffer_size(p: int) -> int:
    """Tokens kept per depth for the radius ratio of a width-``p`` model: ``BUFFER``, or the fewest that give
    ``sphere_power`` where ``BUFFER`` does not (Gemma 3's width 640 needs 1,067)."""
    return max(BUFFER, math.ceil(p / SPHERE_POWER))


def _excess_kurtosis(y: Tensor) -> Tensor:
    yc = y - y.mean(0)
    return (yc**4).mean(0) / (yc**2).mean(0).clamp_min(1e-300) ** 2 - 3


def principal_kurtosis(cloud: Spectrum) -> Float[Tensor, ""]:
    """The excess kurtosis of a cloud along its top principal direction (a scalar tensor on its device)."""
    xc, _, vec = cloud
    return _excess_kurtosis(xc @ vec[:, -1])


def direction_moments(x: Float[Tensor, "n dim"], directions: Float[Tensor, "dim k"]) -> tuple[float, float]:
    """Mean |excess kurtosis| and mean |skewness| of ``x`` ``(n, D)`` along ``directions`` ``(D, K)``."""
    y = x.double() @ directions
    yc = y - y.mean(0)
    var = (yc**2).mean(0)
    return float(_excess_kurtosis(y).abs().mean()), float(((yc**3).mean(0) / var**1.5).abs().mean())


def close_and_far(
    kurt: Float[Tensor, " depth"], skew: Float[Tensor, " depth"], rho: Float[Tensor, " depth"],
    kurt_low: Float[Tensor, " depth"],
) -> tuple[Bool[Tensor, " depth"], Bool[Tensor, " depth"]]:
    """Per depth: close to Gaussian, and far from it (see module); a NaN radius ratio is neither. Each argument
    is ``(depth,)``, or broadcasts to a common shape (per bootstrap replicate: ``(R, depth)``), as each result does."""
    inside = (rho >= RADIUS_BAND[0]) & (rho <= RADIUS_BAND[1])
    outside = (rho < RADIUS_BAND[0]) | (rho > RADIUS_BAND[1])
    return (kurt < KURTOSIS_LIMIT) & (skew < SKEW_LIMIT) & inside, (kurt_low > KURTOSIS_LIMIT) | outside


def control_clouds(n: int, dim: int, seed: int) -> dict[str, tuple[str, Float[Tensor, "n dim"]]]:
    """Synthetic clouds of ``n`` points in ``dim`` dimensions with known answers: name -> (control kind, cloud
    ``(n, dim)``).

    A Gaussian (positive), points on a sphere and a Student t with 5 degrees of freedom (negative), each
    mapped by the same random linear map so that none is isotropic."""
    gen = torch.Generator().manual_seed(seed)
    g = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    chi2 = 2 * torch._standard_gamma(torch.full((n, 1), 2.5, dtype=torch.float64), generator=gen)  # chi^2_5
    mix = torch.randn(dim, dim, generator=gen, dtype=torch.float64) / math.sqrt(dim)
    return {
        "Gaussian cloud": ("positive", g @ mix),
        "points on a sphere": ("negative", (g / g.norm(dim=1, keepdim=True)) @ mix),
        "Student t (5 degrees of freedom)": ("negative", (g / (chi2 / 5).sqrt()) @ mix),
    }
