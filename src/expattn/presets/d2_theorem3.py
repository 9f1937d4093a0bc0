r"""Storage capacity of Ramsauer et al. 2020, Theorem 3, beside a measurement in the theorem's own setting.

Theorem 3 (*Hopfield Networks is All You Need*, arXiv:2008.02217, §2): for a failure probability
$0 < p \le 1$ and patterns drawn uniformly on the sphere of radius $M = K\sqrt{d-1}$ in $\mathbb{R}^d$, let

$$a = \tfrac{2}{d-1}\big(1 + \ln(2\beta K^2 p (d-1))\big), \quad b = \tfrac{2K^2\beta}{5}, \quad
c = \frac{b}{W_0(\exp(a + \ln b))},$$

$W_0$ the upper branch of the Lambert W function, and require $c \ge (2/\sqrt p)^{4/(d-1)}$. Then with
probability $1 - p$ the number of random patterns that can be stored is $N \ge \sqrt p\, c^{(d-1)/4}$.
The paper's worked values: $c \ge 3.1546$ for $\beta = 1, K = 3, d = 20, p = 0.001$ ($a + \ln b > 1.27$)
and $c \ge 1.3718$ for $\beta = 1, K = 1, d = 75, p = 0.001$ ($a + \ln b < -0.94$).

"Stored" (the paper's Definition 1): a sphere $S_i$ around each pattern holds a single fixed point that
attracts all of $S_i$, the spheres disjoint. The measurement reads it as: one update from a query at
distance $r = 1/(2\beta M)$ of $x_i$ (the radius of the paper's Theorem 5) lands within $r$ of $x_i$.
"""

from __future__ import annotations

import math

import torch
from scipy.special import lambertw

from expattn.arguments import finite_number
from expattn.core.empirical import Empirical

SOURCE = "Ramsauer et al. 2020, Theorem 3"
WORKED = ((1.0, 3.0, 20, 0.001), (1.0, 1.0, 75, 0.001))  # the theorem's examples: (beta, K, d, p)


def _check(beta: float, k: float, d: int, p: float) -> None:
    finite_number("beta", beta, above=0)
    finite_number("K", k, above=0)
    if isinstance(d, bool) or not isinstance(d, int) or d < 2:
        raise ValueError(f"d must be an integer >= 2, got {d!r}")
    finite_number("p", p, above=0)
    if p > 1:
        raise ValueError(f"p must be a probability in (0, 1], got {p!r}")


def theorem3_constant(beta: float, k: float, d: int, p: float) -> float:
    r"""$c = b / W_0(\exp(a + \ln b))$ of Theorem 3 with $a$, $b$ as in the module docstring (scalars)."""
    _check(beta, k, d, p)
    a = 2.0 / (d - 1) * (1.0 + math.log(2.0 * beta * k**2 * p * (d - 1)))
    b = 2.0 * k**2 * beta / 5.0
    return b / float(lambertw(math.exp(a + math.log(b))).real)


def theorem3_capacity(beta: float, k: float, d: int, p: float) -> float:
    r"""$\sqrt p\, c^{(d-1)/4}$: the number of patterns Theorem 3 guarantees to store with probability $1 - p$.

    Raises ``ValueError`` where the theorem's condition $c \ge (2/\sqrt p)^{4/(d-1)}$ fails (it says nothing there).
    """
    c = theorem3_constant(beta, k, d, p)
    floor = (2.0 / math.sqrt(p)) ** (4.0 / (d - 1))
    if c < floor:
        raise ValueError(f"Theorem 3 needs c >= (2/sqrt(p))^(4/(d-1)) = {floor:.4g}; beta={beta}, K={k}, d={d}, "
                         f"p={p} give c = {c:.4g}")
    return math.sqrt(p) * c ** ((d - 1) / 4)


def sphere_retrieved(x: torch.Tensor, beta: float, gen: torch.Generator, queries: int) -> torch.Tensor:
    r"""Whether one update from $\xi = x_i + r u$ ($u$ a random unit vector, $r = 1/(2\beta M)$) lands within $r$
    of $x_i$, for the first ``min(N, queries)`` patterns of each draw.

    Args: ``x`` ``(draw, pattern, dim)`` patterns on the sphere of radius $M$; returns ``(draw, query)`` booleans.
    """
    m = x.norm(dim=-1).amax().item()
    r = 1.0 / (2.0 * beta * m)
    target = x[:, : min(x.shape[1], queries)]
    u = torch.randn(target.shape, generator=gen, dtype=x.dtype)
    xi = target + r * u / u.norm(dim=-1, keepdim=True)
    return (Empirical(x).mean(beta * xi) - target).norm(dim=-1) <= r


def on_sphere(draws: int, n: int, d: int, radius: float, gen: torch.Generator) -> torch.Tensor:
    """``(draws, n, d)`` patterns uniform on the sphere of ``radius`` (normalised Gaussians)."""
    x = torch.randn(draws, n, d, generator=gen, dtype=torch.float64)
    return radius * x / x.norm(dim=-1, keepdim=True)


def published(gen: torch.Generator, queries: int, top: int, draws: int) -> list[dict[str, object]]:
    """Theorem 3 beside our measurement, for each of the theorem's worked settings: the guaranteed number of
    patterns vs the largest N on a doubling grid 2..2^top at which every sampled query (up to ``queries`` per N)
    was retrieved, and the failure probability p vs the fraction of ``draws`` draws of ceil(bound) patterns in
    which some pattern was not retrieved."""
    sizes = [2**j for j in range(1, top + 1)]
    rows: list[dict[str, object]] = []
    for beta, k, d, p in WORKED:
        setting = f"beta={beta:g}, K={k:g}, d={d}, p={p:g}"
        radius = k * math.sqrt(d - 1)
        bound = theorem3_capacity(beta, k, d, p)
        stored = 0
        for n in sizes:
            x = on_sphere(math.ceil(queries / n), n, d, radius, gen)
            if not bool(sphere_retrieved(x, beta, gen, queries).all()):
                break
            stored = n
        censored = stored == sizes[-1]
        rows.append({
            "source": SOURCE,
            "measure": f"patterns stored ({setting}, patterns uniform on the sphere of radius K sqrt(d-1))",
            "published": round(bound, 2),
            "ours": stored,
            "note": "the theorem's sqrt(p) c^((d-1)/4) is a lower bound that holds with probability 1-p; ours is the "
            f"largest N in 2..{sizes[-1]} (doubling) at which one update from every sampled query (up to {queries} "
            "per N, at distance 1/(2 beta M) of its pattern) landed within that distance"
            + (" - no failure up to the largest N tried, so ours is itself a lower bound" if censored else ""),
        })
        n = math.ceil(bound)
        x = on_sphere(draws, n, d, radius, gen)
        failures = int((~sphere_retrieved(x, beta, gen, n).all(-1)).sum())
        rows.append({
            "source": SOURCE,
            "measure": f"failure probability with N = {n} patterns ({setting})",
            "published": p,
            "ours": failures / draws,
            "note": f"the theorem allows failure with probability p at N >= {bound:.2f}; ours is the fraction of "
            f"{draws} draws of {n} patterns in which some pattern was not retrieved"
            + (f" - none failed, so the failure rate is below {3 / draws:.2g} (95%, rule of three)" if failures == 0
               else ""),
        })
    return rows
