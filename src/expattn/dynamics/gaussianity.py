r"""One Gaussianity decision over a family of clouds, at a stated family-wise error rate.

A verdict that reads "this cloud is Gaussian" for several clouds (B5's final clouds in D = 2, 8, 32; B6's runs)
makes one decision from many tests. Each cloud ``(1, token, dim)`` gets three tests of $H_0$: the cloud is an
i.i.d. sample of some Gaussian $N(\mu, \Sigma)$:

- Mardia's skewness, $T b_1/6 \sim \chi^2_{D(D+1)(D+2)/6}$ (asymptotic; conservative at these sizes,
  ``benchmarks/bench_gaussianity_null.py``);
- Mardia's kurtosis, $|b_2 - E b_2|/\operatorname{sd} b_2$ with Mardia's (1974) exact finite-$T$ moments
  $E b_2 = D(D+2)\tfrac{T-1}{T+1}$, $\operatorname{Var} b_2 = \tfrac{8D(D+2)(T-3)(T-D-1)(T-D+1)}{(T+1)^2(T+3)(T+5)}$;
- the coordinate kurtosis, $\max_i |k_i - E k|/\operatorname{sd} k$ over the coordinates of the Cholesky-standardised
  cloud $z = L^{-1}(x - \bar x)$, $LL^\top = \bar S$, with the univariate exact moments (it sees two clusters along
  one axis, which Mardia's kurtosis dilutes in D = 8).

The two kurtosis statistics have right tails heavier than the normal's (at $T = 600$ the normal approximation
rejects 3 to 50 times too often at $10^{-4}$), so their p-values are Monte Carlo:
$p = (1 + \#\{\text{null} \ge \text{observed}\})/(1 + K)$ over $K$ clouds drawn from $N(0, I_D)$ of the same
size. Both are computed on $z$, whose law under $H_0$ does not depend on $\mu$ or $\Sigma$ ($x = \mu + L_\Sigma Q g$
with $Q$ orthogonal standardises to the standardisation of $Qg \sim N(0, I)$), so the null is exact, and
$K \ge m/\alpha$ makes the smallest p-value reachable.

The family's $m$ p-values (three per cloud) go through Holm's step-down procedure at level $\alpha$: the probability
that any Gaussian cloud of the family is rejected is at most $\alpha$. A numerically rank-deficient cloud has no
density in $D$ dimensions and is **not Gaussian**, decided before any test (it spends none of $\alpha$).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.dynamics.metrics import conditioning, mardia, rank_tolerance, sliced_wasserstein_gaussian, standardised

FWER = 1e-3  # family-wise error rate of one Gaussianity decision (all its clouds and tests together)
TESTS = ("skewness_p", "kurtosis_p", "coordinate_kurtosis_p")  # the p-values of one cloud, in Holm's family
MAX_TOKENS = 1000  # clouds larger than this are tested on a random subset of this size
NULL_CHUNK = 4_000_000  # floats of null clouds drawn at once (16 MB in float32)


def _kurtosis_moments(tokens: int, dim: int) -> tuple[float, float]:
    """Mardia's exact mean and standard deviation of $b_2$ for a Gaussian sample of ``tokens`` in ``dim``."""
    t, d = tokens, dim
    mean = d * (d + 2) * (t - 1) / (t + 1)
    var = 8 * d * (d + 2) * (t - 3) * (t - d - 1) * (t - d + 1) / ((t + 1) ** 2 * (t + 3) * (t + 5))
    return mean, math.sqrt(var)


def kurtosis_statistics(z: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch 2"]:
    r"""$(|b_2 - E b_2|/\mathrm{sd}\,b_2,\ \max_i |k_i - E k|/\mathrm{sd}\,k)$ of standardised clouds ``z``:
    Mardia's kurtosis and the largest coordinate kurtosis, each centred and scaled by its exact null moments
    (the coordinate's with ``dim`` = 1)."""
    tokens, dim = z.shape[-2], z.shape[-1]
    m_mean, m_sd = _kurtosis_moments(tokens, dim)
    c_mean, c_sd = _kurtosis_moments(tokens, 1)
    b2 = z.square().sum(-1).square().mean(-1)  # (B,)
    coordinate = z.pow(4).mean(-2) / z.square().mean(-2).square()  # (B, D)
    return torch.stack([(b2 - m_mean).abs() / m_sd, ((coordinate - c_mean).abs() / c_sd).amax(-1)], -1)


def null_kurtosis(tokens: int, dim: int, draws: int, gen: torch.Generator) -> Float[Tensor, "draws 2"]:
    r"""``kurtosis_statistics`` of ``draws`` clouds ``(tokens, dim)`` drawn from $N(0, I)$ with ``gen``.

    The clouds are drawn and standardised in float32 (half the cost of float64) and their statistics taken in
    float64: the rounding moves a scaled deviation by about $10^{-6} D(D+2)/\mathrm{sd}\,b_2 < 10^{-3}$, far
    below the spacing of the null's upper tail.
    """
    chunk = max(1, NULL_CHUNK // (tokens * dim))
    out = []
    for start in range(0, draws, chunk):
        g = torch.randn(min(chunk, draws - start), tokens, dim, generator=gen)  # (K, T, D) float32
        c = g - g.mean(-2, keepdim=True)
        chol = torch.linalg.cholesky(c.mT @ c / tokens)
        out.append(kurtosis_statistics(torch.linalg.solve_triangular(chol, c.mT, upper=False).mT.double()))
    return torch.cat(out)


def holm(pvalues: list[float], alpha: float) -> list[bool]:
    r"""Holm's step-down rejections: sort $p_{(1)} \le \dots \le p_{(m)}$ and reject $p_{(1)}, \dots, p_{(k)}$ for
    the largest $k$ with $p_{(j)} \le \alpha/(m - j + 1)$ for every $j \le k$. Family-wise error $\le \alpha$."""
    order = np.argsort(pvalues, kind="stable")
    reject = [False] * len(pvalues)
    for rank, i in enumerate(order):
        if pvalues[i] > alpha / (len(pvalues) - rank):
            break
        reject[i] = True
    return reject


def draws_for(tests: int, alpha: float) -> int:
    """The number $K$ of null clouds that lets a Monte Carlo p-value reach Holm's smallest level $\\alpha/m$."""
    return max(1000, math.ceil(tests / alpha))


def _cloud_statistics(x: Tensor, gen: torch.Generator, max_tokens: int) -> tuple[Tensor | None, dict[str, float]]:
    """The tested subset ``(1, T, D)`` of ``x`` (``None`` when rank-deficient) and its descriptive statistics."""
    if x.shape[-2] > max_tokens:
        x = x[:, torch.randperm(x.shape[-2], generator=gen)[:max_tokens]]
    ratio = float(conditioning(x)[0])
    if ratio < rank_tolerance(x.dtype):
        return None, {"covariance_eigenvalue_ratio": ratio, "rank_deficient": 1.0}
    m, sw = mardia(x), sliced_wasserstein_gaussian(x, gen, directions=16, null_draws=20)
    return x, {
        "skewness_p": float(m["skewness_p"][0]),
        "sw_excess": float(sw["excess"][0]),
        "sw_z": float(sw["z"][0]),
        "covariance_eigenvalue_ratio": ratio,
        "rank_deficient": 0.0,
    }


def gaussian_family(
    clouds: list[Float[Tensor, "1 token dim"]],
    gen: torch.Generator,
    alpha: float = FWER,
    max_tokens: int = MAX_TOKENS,
    nulls: dict[tuple[int, int], Tensor] | None = None,
) -> list[tuple[bool, dict[str, float]]]:
    r"""Per cloud of one decision: (accepted as Gaussian, its statistics), Holm at family-wise level ``alpha``.

    ``nulls`` ``{(tokens, dim): (K, 2) null statistics}`` lets several decisions of one run share their Monte Carlo
    nulls (a table with enough draws is reused, a smaller one drawn again and stored): each decision's null stays
    independent of its own clouds, so its error rate is unchanged.

    Statistics of a tested cloud: ``skewness_p``, ``kurtosis_p``, ``coordinate_kurtosis_p`` (the three tested),
    ``kurtosis_z`` and ``coordinate_kurtosis_z`` (the observed scaled deviations), ``sw_excess`` and ``sw_z``
    (the sliced-W2 distance to the fitted Gaussian over a 20-draw Gaussian null: reported, not tested, since its
    null is too coarse for these levels), ``covariance_eigenvalue_ratio``, ``rank_deficient``, ``null_draws``,
    ``family_tests`` ($m$) and ``family_alpha``.
    """
    tested = [_cloud_statistics(x, gen, max_tokens) for x in clouds]
    m = len(TESTS) * sum(z is not None for z, _ in tested)
    draws, nulls = draws_for(max(m, 1), alpha), {} if nulls is None else nulls
    for z, row in tested:
        if z is None:
            continue
        size = (z.shape[-2], z.shape[-1])
        if size not in nulls or len(nulls[size]) < draws:
            nulls[size] = null_kurtosis(*size, draws, gen)
        observed = kurtosis_statistics(standardised(z))[0]  # (2,)
        exceed = (nulls[size] >= observed).sum(0)  # (2,)
        p = ((1 + exceed).double() / (1 + len(nulls[size]))).tolist()
        row.update(kurtosis_p=p[0], coordinate_kurtosis_p=p[1], kurtosis_z=float(observed[0]),
                   coordinate_kurtosis_z=float(observed[1]), null_draws=float(len(nulls[size])))
    pvalues = [row[t] for z, row in tested if z is not None for t in TESTS]
    rejected = iter(holm(pvalues, alpha))
    out = []
    for z, row in tested:
        row.update(family_tests=float(m), family_alpha=alpha)
        out.append((z is not None and not any([next(rejected) for _ in TESTS]), row))
    return out
