r"""D2 building blocks and decision rules: pattern separation, the sweeps the D2 presets run and the ``judge_*``
rules that decide them (each also run on the presets' negative controls).

The update is the package's ``expattn.core.hopfield.hopfield_update``, $f(\xi) = X^\top \operatorname{softmax}(\beta
X \xi)$ with the stored patterns $x_j$ as rows of $X$: the mean of the empirical family with atoms $x_j$ at
$\eta = \beta\xi$ (claim A3).
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.core.empirical import Empirical
from expattn.core.hopfield import hopfield_update


def unit_rows(x: Tensor) -> Tensor:
    """Rows scaled to unit Euclidean norm."""
    return x / x.norm(dim=-1, keepdim=True)


def separation(
    patterns: Float[Tensor, "*batch pattern dim"], queries: Float[Tensor, "*batch pattern dim"] | None = None
) -> Float[Tensor, "*batch pattern"]:
    r"""$\min_{j \ne i} q_i^\top (x_i - x_j)$ per pattern $i$, with $q_i = x_i$ (the $\Delta_i$ of Ramsauer et al.)."""
    q = patterns if queries is None else queries
    scores = q @ patterns.mT  # (*B, N, N)
    own = scores.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)
    eye = torch.eye(patterns.shape[-2], dtype=torch.bool)
    return (own - scores).masked_fill(eye, math.inf).amin(-1)


SLOPE_BAND = (-1.2, -0.8)  # exponential decay at the bound's rate has slope -1; the fit's spread is ~0.05


def judge_one_step(errors: Tensor, bounds: Tensor, gaps: Tensor) -> tuple[str, int, float]:
    r"""``pass`` iff no error exceeds its Theorem 5 bound (beyond a relative 1e-9 of rounding) and the slope of
    $\log$ error against the query's gap $\beta \min_{j \ne i} \xi^\top(x_i - x_j)$ (fitted where the gap is
    above 2 and the error above 0) lies in ``SLOPE_BAND``; also returns the violations and the slope."""
    violations = int((errors > bounds * (1 + 1e-9)).sum())
    fit = (gaps > 2) & (errors > 0)  # beyond the first e-fold; exact zeros are underflow
    slope = float(np.polyfit(gaps[fit].numpy(), np.log(errors[fit].numpy()), 1)[0])
    ok = violations == 0 and SLOPE_BAND[0] <= slope <= SLOPE_BAND[1]
    return ("pass" if ok else "fail"), violations, slope


QUERY_COSINE, RETRIEVED = 0.5, 0.1  # queries at this cosine to a unit pattern; retrieved within this distance


def retrieval_curves(
    gen: torch.Generator, sizes: list[int], betas: tuple[float, ...], dims: tuple[int, ...], queries: int
) -> dict[tuple[int, float], list[float]]:
    """Fraction of cosine-``QUERY_COSINE`` queries that one update brings within ``RETRIEVED`` of their unit-norm
    pattern, per ``(d, beta)`` and stored-pattern count in ``sizes`` (at least ``queries`` queries per point)."""
    fraction = {}
    for d in dims:
        for n in sizes:
            trials = math.ceil(queries / n)
            x = unit_rows(torch.randn(trials, n, d, generator=gen, dtype=torch.float64))
            q = min(n, queries)
            target = x[:, :q]
            u = torch.randn(trials, q, d, generator=gen, dtype=torch.float64)
            u = unit_rows(u - (u * target).sum(-1, keepdim=True) * target)
            xi = QUERY_COSINE * target + math.sqrt(1 - QUERY_COSINE**2) * u
            for beta in betas:
                err = (hopfield_update(xi, x, beta) - target).norm(dim=-1)
                fraction[(d, beta, n)] = (err < RETRIEVED).double().mean().item()
    return {(d, b): [fraction[(d, b, n)] for n in sizes] for d in dims for b in betas}


def capacity_of(curve: list[float], sizes: list[int]) -> int:
    """Largest N of ``sizes`` at which at least 90% of the queries were retrieved (0 if none)."""
    kept = [n for n, f in zip(sizes, curve, strict=True) if f >= 0.9]
    return max(kept) if kept else 0


def judge_capacity(
    curves: dict[tuple[int, float], list[float]], sizes: list[int], betas: tuple[float, ...],
    dims: tuple[int, ...], queries: int,
) -> tuple[str, dict[str, bool]]:
    """``pass`` iff every curve falls with N (no rise above 3 binomial standard errors), capacity at the largest
    beta is larger in the larger d, capacity never falls as beta grows, and at least 95% of the queries are
    retrieved at the smallest N in the largest d and beta; also returns those four flags."""
    slack = 3 * math.sqrt(0.25 / queries)
    best = max(betas)
    flags = {
        "monotone": all(max(np.diff(c), default=0.0) <= slack for c in curves.values()),
        "grows_with_d": capacity_of(curves[(dims[-1], best)], sizes) > capacity_of(curves[(dims[0], best)], sizes),
        "grows_with_beta": all(capacity_of(curves[(d, b1)], sizes) <= capacity_of(curves[(d, b2)], sizes)
                               for d in dims for b1, b2 in pairwise(betas)),
        "one_step": curves[(dims[-1], best)][0] >= 0.95,
    }
    return ("pass" if all(flags.values()) else "fail"), flags


def iterate_to_fixed_point(
    xi: Float[Tensor, "query dim"],
    patterns: Float[Tensor, "pattern dim"],
    beta: float,
    tol: float = 1e-10,
    max_iter: int = 400,
) -> tuple[Float[Tensor, "query dim"], Float[Tensor, "step query"], int, float]:
    r"""Iterate $\xi \leftarrow f(\xi)$ until the largest step is below ``tol`` (at most ``max_iter`` times).

    Returns the last state, the energies $E(\xi_t) = \frac12|\xi_t|^2 - \beta^{-1}\operatorname{lse}(\beta X\xi_t)$
    before each update (claim D1: never increasing), the number of updates and the last step length.
    """
    energies, step = [], math.inf
    for it in range(max_iter):  # noqa: B007 - the count is returned
        energies.append(0.5 * (xi**2).sum(-1) - torch.logsumexp(beta * xi @ patterns.mT, -1) / beta)
        new = hopfield_update(xi, patterns, beta)
        step = (new - xi).norm(dim=-1).max().item()
        xi = new
        if step < tol:
            break
    return xi, torch.stack(energies), it + 1, step


def fixed_point_sweep(x: Tensor, betas: np.ndarray) -> dict[str, list[float] | float]:
    r"""Iterate from every pattern of ``x`` ``(pattern, dim)`` to a fixed point at each beta; the median, min and max
    over starts of $1/\sum_j p_j^2$ there, the largest energy rise between updates and the largest final step."""
    median, low, high, worst_rise, worst_step = [], [], [], 0.0, 0.0
    for beta in betas:
        xi, energies, _, step = iterate_to_fixed_point(x.clone(), x, float(beta))
        worst_rise = max(worst_rise, (energies[1:] - energies[:-1]).max().item() if len(energies) > 1 else 0.0)
        worst_step = max(worst_step, step)
        n_eff = 1.0 / (Empirical(x).probs(beta * xi) ** 2).sum(-1)
        median.append(n_eff.median().item())
        low.append(n_eff.min().item())
        high.append(n_eff.max().item())
    return {"n_eff_median": median, "n_eff_min": low, "n_eff_max": high, "max_energy_rise": worst_rise,
            "max_final_step": worst_step}


def judge_metastable(sweep: dict[str, list[float] | float], n: int, size: int) -> tuple[str, dict[str, bool]]:
    """``pass`` iff the median number of averaged patterns is above 0.9 ``n`` at the smallest beta, below 1.1 at
    the largest, within 0.5-1.5 ``size`` at some beta, never rises by more than 0.05 ``n`` from one beta to the
    next, and every iteration converged (last step < 1e-8) with the energy never rising by more than 1e-12."""
    median = sweep["n_eff_median"]
    flags = {
        "global_average": median[0] > 0.9 * n,
        "single_pattern": median[-1] < 1.1,
        "plateau": any(0.5 * size <= m <= 1.5 * size for m in median),
        "descending": all(b <= a + 0.05 * n for a, b in pairwise(median)),
        "converged": sweep["max_final_step"] < 1e-8 and sweep["max_energy_rise"] <= 1e-12,
    }
    return ("pass" if all(flags.values()) else "fail"), flags


CONTROL_BETA = 0.01  # beta * |x|^2 = 0.09 for patterns of norm 3: softmax weights within 10% of uniform


def fixed_and_self_traces(x: Tensor, start: Tensor, beta: float, steps: int) -> dict[str, list[float]]:
    """Iterate from ``start`` with the patterns ``x`` fixed (Hopfield) and with the states as their own patterns
    (self-attention, no residual): per step the largest step, the largest distance to ``x`` of both, and the
    self-attention cloud's diameter."""
    fixed, moving = start.clone(), start.clone()
    trace = {"step_fixed": [], "step_self": [], "dist_fixed": [], "dist_self": [], "diameter_self": []}
    for _ in range(steps):
        new_fixed = hopfield_update(fixed, x, beta)  # stored patterns stay x
        new_moving = hopfield_update(moving, moving, beta)  # the states are their own patterns
        trace["step_fixed"].append((new_fixed - fixed).norm(dim=-1).max().item())
        trace["step_self"].append((new_moving - moving).norm(dim=-1).max().item())
        fixed, moving = new_fixed, new_moving
        trace["dist_fixed"].append((fixed - x).norm(dim=-1).max().item())
        trace["dist_self"].append((moving - x).norm(dim=-1).max().item())
        trace["diameter_self"].append(torch.cdist(moving, moving).max().item())
    return trace


def judge_fixed_vs_changing(trace: dict[str, list[float]], diameter0: float) -> str:
    """``pass`` iff with fixed patterns one update lands within 0.1 of every pattern and the last step is below
    1e-10, and self-attention ends more than 1.0 from the patterns with a cloud smaller than ``diameter0``."""
    retrieves = trace["dist_fixed"][0] < 0.1 and trace["step_fixed"][-1] < 1e-10
    drifts = trace["dist_self"][-1] > 1.0 and trace["diameter_self"][-1] < diameter0
    return "pass" if retrieves and drifts else "fail"
