r"""D2 presets: retrieval with fixed stored patterns in the modern Hopfield network (seed 001).

The update is $\xi \leftarrow f(\xi) = X^\top \operatorname{softmax}(\beta X \xi)$ with the stored patterns
$x_j$ as rows of $X$; it is the mean of the empirical family with atoms $x_j$ at $\eta = \beta\xi$
(``Empirical(X).mean(beta * xi)``, claim A3).

The bound used is Theorem 5 ("exponentially small retrieval error") of Ramsauer et al.,
*Hopfield Networks is All You Need*, ICLR 2021 (arXiv:2008.02217, §2): with separation
$\Delta_i = x_i^\top x_i - \max_{j \ne i} x_i^\top x_j$ and $M = \max_j |x_j|$,

$$|f(\xi) - x_i| \le 2 (N - 1)\, M \exp\big(-\beta(\Delta_i - 2 \max\{|\xi - x_i|, |x_i^* - x_i|\} M)\big).$$

The presets check the form with $|\xi - x_i|$ in place of the max, which is at least as strong and is
what the proof gives for any $\xi$: $\xi^\top(x_i - x_j) \ge \Delta_i - 2M|\xi - x_i|$ bounds the softmax
mass off pattern $i$ by $(N-1)e^{-\beta(\Delta_i - 2M|\xi - x_i|)}$, and $|f(\xi) - x_i| \le 2M$ times that mass.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import finite_number
from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.tools import generator
from expattn.core.empirical import Empirical
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Record


def unit_rows(x: Tensor) -> Tensor:
    """Rows scaled to unit Euclidean norm."""
    return x / x.norm(dim=-1, keepdim=True)


def hopfield_update(
    xi: Float[Tensor, "*batch query dim"], patterns: Float[Tensor, "*batch pattern dim"], beta: float
) -> Float[Tensor, "*batch query dim"]:
    r"""$f(\xi) = X^\top \operatorname{softmax}(\beta X \xi)$.

    Args: ``xi`` ``(*batch, query, dim)`` states, ``patterns`` ``(*batch, pattern, dim)``; returns ``xi``'s shape.
    """
    finite_number("beta", beta, above=0)
    return Empirical(patterns).mean(beta * xi)


def separation(
    patterns: Float[Tensor, "*batch pattern dim"], queries: Float[Tensor, "*batch pattern dim"] | None = None
) -> Float[Tensor, "*batch pattern"]:
    r"""$\min_{j \ne i} q_i^\top (x_i - x_j)$ per pattern $i$, with $q_i = x_i$ (the $\Delta_i$ of Ramsauer et al.)."""
    q = patterns if queries is None else queries
    scores = q @ patterns.mT  # (*B, N, N)
    own = scores.diagonal(dim1=-2, dim2=-1).unsqueeze(-1)
    eye = torch.eye(patterns.shape[-2], dtype=torch.bool)
    return (own - scores).masked_fill(eye, math.inf).amin(-1)


@register_claim(
    "D2",
    method="N=16 random patterns of norm r in d=32, queries x_i + 5% noise, one update, beta in {0.5,1,2,4}, "
    "8 radii; every error vs the Theorem 5 bound, and the slope of log error against beta * (query's gap)",
    command="simulate",
    name="d2-one-step-error",
)
def one_step_error(ctx: RunContext) -> Record:
    gen = generator(ctx.seed)
    d, n, noise, trials = 32, 16, 0.05, 2 if ctx.quick else 8
    betas = (0.5, 1.0, 2.0, 4.0)
    radii = torch.linspace(0.5, 4.5, 5 if ctx.quick else 9, dtype=torch.float64)
    rows = []
    for beta in betas:
        shape = (len(radii), trials, n, d)
        r = radii.view(-1, 1, 1, 1)
        x = r * unit_rows(torch.randn(*shape, generator=gen, dtype=torch.float64))
        xi = x + noise * r * unit_rows(torch.randn(*shape, generator=gen, dtype=torch.float64))
        err = (hopfield_update(xi, x, beta) - x).norm(dim=-1)  # (R, T, N)
        m = x.norm(dim=-1).amax(-1, keepdim=True)
        delta = separation(x)  # (R, T, N)
        exponent = beta * (delta - 2 * (xi - x).norm(dim=-1) * m)
        bound = 2 * (n - 1) * m * torch.exp(-exponent)
        gap = beta * separation(x, xi)  # the query's own softmax gap
        rows.append((beta, err, bound, exponent, gap, m, delta))
    errors = torch.stack([row[1] for row in rows])  # (beta, R, T, N)
    bounds = torch.stack([row[2] for row in rows])
    violations = int((errors > bounds * (1 + 1e-9)).sum())
    gaps = torch.stack([row[4] for row in rows])
    fit = (gaps > 2) & (errors > 0)  # beyond the first e-fold; exact zeros are underflow
    slope, _ = np.polyfit(gaps[fit].numpy(), np.log(errors[fit].numpy()), 1)
    ok = violations == 0 and -1.2 <= slope <= -0.8
    record = Record(
        id="D2",
        kind="dynamics",
        verdict="pass" if ok else "fail",
        metrics={
            "bound_violations": violations,
            "trials": errors.numel(),
            "log_error_slope_vs_beta_gap": float(slope),
            "max_error_over_bound": float((errors / bounds).max()),
            "smallest_error": float(errors[errors > 0].min()),
        },
        notes=f"errors never exceed the Theorem 5 bound ({violations} violations in {errors.numel()}); "
        f"log error falls with slope {slope:.2f} per unit of beta * gap (exponential decay has slope -1)",
    )
    if ctx.out_dir is not None:
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for beta, err, _, exponent, _, m, _ in rows:
            scaled = (err / (2 * (n - 1) * m)).flatten()
            left.scatter(exponent.flatten(), scaled.clamp_min(1e-30), s=4, alpha=0.4, label=f"beta = {beta:g}")
        exponents = torch.stack([row[3] for row in rows])
        grid = np.linspace(float(exponents.min()), float(exponents.max()), 200)
        left.plot(grid, np.exp(-grid), "k-", lw=2, label="Theorem 5 bound")
        left.set_yscale("log")
        left.set_ylim(1e-18, 10)
        left.set_xlim(-1, min(float(exponents.max()), 44.0))  # the bound leaves the plot at -ln(1e-18) ~ 41
        left.set_xlabel("beta * (Delta_i - 2 M |xi - x_i|)")
        left.set_ylabel("|f(xi) - x_i| / (2 (N-1) M)")
        left.set_title("one-step error vs the bound (points must lie below the line)")
        left.legend(fontsize=8, markerscale=3)
        for beta, err, bound, _, _, _, delta in rows:
            median_delta = delta.flatten(1).median(-1).values
            median_err = err.flatten(1).median(-1).values.clamp_min(1e-30)
            line = right.semilogy(median_delta, median_err, "o-", label=f"beta = {beta:g}")
            right.semilogy(median_delta, bound.flatten(1).median(-1).values, "--", color=line[0].get_color())
        right.set_ylim(1e-18, 1e3)
        right.set_xlabel("median separation Delta_i (patterns of growing norm)")
        right.set_ylabel("median one-step error (solid) and bound (dashed)")
        right.set_title("retrieval error decays exponentially with separation")
        right.legend(fontsize=8)
        record.plots = save_figure(fig, ctx.out_dir, "d2_one_step_error.png")
    return record


@register_claim(
    "D2",
    method="N = 2..2^13 unit-norm random patterns, d in {32, 64}, beta in {16,32,64,128}; queries at cosine 0.5 "
    "to a pattern; retrieved if one update lands within 0.1 of it; >= 128 queries per point",
    command="simulate",
    name="d2-capacity",
)
def capacity(ctx: RunContext) -> Record:
    gen = generator(ctx.seed)
    cosine, tol, queries = 0.5, 0.1, 32 if ctx.quick else 128
    sizes = [2**k for k in range(1, 11 if ctx.quick else 14)]
    betas, dims = (16.0, 32.0, 64.0, 128.0), (32, 64)
    fraction = {}
    for d in dims:
        for n in sizes:
            trials = math.ceil(queries / n)
            x = unit_rows(torch.randn(trials, n, d, generator=gen, dtype=torch.float64))
            q = min(n, queries)
            target = x[:, :q]
            u = torch.randn(trials, q, d, generator=gen, dtype=torch.float64)
            u = unit_rows(u - (u * target).sum(-1, keepdim=True) * target)
            xi = cosine * target + math.sqrt(1 - cosine**2) * u
            for beta in betas:
                err = (hopfield_update(xi, x, beta) - target).norm(dim=-1)
                fraction[(d, beta, n)] = (err < tol).double().mean().item()
    curves = {(d, b): [fraction[(d, b, n)] for n in sizes] for d in dims for b in betas}

    def capacity_of(curve: list[float]) -> int:
        kept = [n for n, f in zip(sizes, curve, strict=True) if f >= 0.9]
        return max(kept) if kept else 0

    caps = {f"capacity_d{d}_beta{b:g}": capacity_of(c) for (d, b), c in curves.items()}
    # Monotone in N up to sampling noise: no rise above 3 binomial standard errors at 128 queries.
    slack = 3 * math.sqrt(0.25 / queries)
    monotone = all(max(np.diff(c), default=0.0) <= slack for c in curves.values())
    best = max(betas)
    grows_with_d = caps[f"capacity_d64_beta{best:g}"] > caps[f"capacity_d32_beta{best:g}"]
    grows_with_beta = all(
        capacity_of(curves[(d, b1)]) <= capacity_of(curves[(d, b2)]) for d in dims for b1, b2 in pairwise(betas)
    )
    one_step = curves[(dims[-1], best)][0] >= 0.95
    ok = monotone and grows_with_d and grows_with_beta and one_step
    record = Record(
        id="D2",
        kind="dynamics",
        verdict="pass" if ok else "fail",
        metrics={**caps, "monotone_in_N": float(monotone), "queries_per_point": queries},
        details={"sizes": sizes, "fraction_retrieved": {f"d{d}_beta{b:g}": c for (d, b), c in curves.items()}},
        notes=f"one update retrieves (within {tol}) from cosine-{cosine} queries until N ~ capacity; capacity grows "
        f"with beta ({grows_with_beta}) and with d ({grows_with_d}); fraction falls with N ({monotone})",
    )
    if ctx.out_dir is not None:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colors = dict(zip(betas, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
        for (d, b), c in curves.items():
            ax.plot(sizes, c, "-" if d == 32 else "--", marker="o", ms=3, color=colors[b], label=f"d={d}, beta={b:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("number of stored patterns N")
        ax.set_ylabel(f"fraction retrieved after one update (error < {tol})")
        ax.set_title("storage capacity: solid d = 32, dashed d = 64")
        ax.legend(fontsize=7, ncol=2)
        record.plots = save_figure(fig, ctx.out_dir, "d2_capacity.png")
    return record


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


@register_claim(
    "D2",
    method="4 clusters of 8 patterns (unit centres, spread 0.15) in d=32; iterate from every pattern to a fixed "
    "point for beta from 0.1 to 1000; effective number of averaged patterns 1/sum p^2; energy never rises",
    command="simulate",
    name="d2-metastable",
)
def metastable(ctx: RunContext) -> Record:
    gen = generator(ctx.seed)
    d, clusters, size = 32, 4, 8
    n = clusters * size
    centres = unit_rows(torch.randn(clusters, d, generator=gen, dtype=torch.float64))
    x = centres.repeat_interleave(size, 0) + 0.15 * unit_rows(torch.randn(n, d, generator=gen, dtype=torch.float64))
    betas = np.logspace(-1, 3, 5 if ctx.quick else 13)
    median, low, high, worst_rise, worst_step = [], [], [], 0.0, 0.0
    for beta in betas:
        xi, energies, _, step = iterate_to_fixed_point(x.clone(), x, float(beta))
        worst_rise = max(worst_rise, (energies[1:] - energies[:-1]).max().item() if len(energies) > 1 else 0.0)
        worst_step = max(worst_step, step)
        n_eff = 1.0 / (Empirical(x).probs(beta * xi) ** 2).sum(-1)
        median.append(n_eff.median().item())
        low.append(n_eff.min().item())
        high.append(n_eff.max().item())
    global_avg = median[0] > 0.9 * n
    single = median[-1] < 1.1
    plateau = any(0.5 * size <= m <= 1.5 * size for m in median)
    descending = all(b <= a + 0.05 * n for a, b in pairwise(median))
    converged = worst_step < 1e-8 and worst_rise <= 1e-12
    ok = global_avg and single and plateau and descending and converged
    record = Record(
        id="D2",
        kind="dynamics",
        verdict="pass" if ok else "fail",
        metrics={
            "n_eff_smallest_beta": median[0],
            "n_eff_largest_beta": median[-1],
            "patterns": n,
            "cluster_size": size,
            "max_energy_rise": worst_rise,
            "max_final_step": worst_step,
        },
        details={"beta": betas.tolist(), "n_eff_median": median, "n_eff_min": low, "n_eff_max": high},
        notes=f"small beta: one global average of ~{median[0]:.1f} patterns; a metastable plateau at about the "
        f"cluster size ({plateau}); large beta: single patterns ({median[-1]:.2f}); energy never rose by more "
        f"than {worst_rise:.1e}",
    )
    if ctx.out_dir is not None:
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.fill_between(betas, low, high, alpha=0.25, label="min-max over the 32 starts")
        ax.plot(betas, median, "o-", label="median")
        levels = ((n, "all patterns (global average)"), (size, "one cluster (metastable)"), (1, "one pattern"))
        for level, text in levels:
            ax.axhline(level, color="gray", ls=":", lw=1)
            ax.text(betas[0], level * 1.08, text, fontsize=8, color="gray")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("beta")
        ax.set_ylabel("patterns averaged at the fixed point, 1 / sum p^2")
        ax.set_title("fixed points: global average -> metastable -> single pattern")
        ax.legend(fontsize=8, loc="center right")
        record.plots = save_figure(fig, ctx.out_dir, "d2_metastable.png")
    return record


@register_claim(
    "D2",
    method="16 patterns of norm 3 in d=32, beta=1, queries = patterns + noise of norm 0.3; 60 iterations with the "
    "patterns fixed (Hopfield retrieval) vs self-attention whose patterns are the moving states (no residual)",
    command="simulate",
    name="d2-fixed-vs-changing",
)
def fixed_vs_changing(ctx: RunContext) -> Record:
    gen = generator(ctx.seed)
    d, n, beta, steps = 32, 16, 1.0, 30 if ctx.quick else 60
    x = 3.0 * unit_rows(torch.randn(n, d, generator=gen, dtype=torch.float64))
    start = x + 0.3 * unit_rows(torch.randn(n, d, generator=gen, dtype=torch.float64))
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
    one_step = trace["dist_fixed"][0]
    diameter0 = torch.cdist(start, start).max().item()
    retrieves = one_step < 0.1 and trace["step_fixed"][-1] < 1e-10
    drifts = trace["dist_self"][-1] > 1.0 and trace["diameter_self"][-1] < diameter0
    record = Record(
        id="D2",
        kind="dynamics",
        verdict="pass" if retrieves and drifts else "fail",
        metrics={
            "fixed_one_step_distance": one_step,
            "fixed_final_step": trace["step_fixed"][-1],
            "self_final_distance_to_patterns": trace["dist_self"][-1],
            "self_diameter_ratio": trace["diameter_self"][-1] / diameter0,
            "iterations": steps,
        },
        details=trace,
        notes=f"fixed patterns: within {one_step:.2g} of the stored pattern after one update, then a fixed point; "
        f"changing patterns: the states leave the stored patterns (max distance {trace['dist_self'][-1]:.2f}) "
        f"while the cloud contracts (diameter x{trace['diameter_self'][-1] / diameter0:.2f})",
    )
    if ctx.out_dir is not None:
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        its = np.arange(1, steps + 1)
        left.semilogy(its, np.maximum(trace["step_fixed"], 1e-17), "o-", ms=3, label="fixed patterns (Hopfield)")
        left.semilogy(its, np.maximum(trace["step_self"], 1e-17), "s-", ms=3, label="changing (self-attention)")
        left.set_xlabel("iteration")
        left.set_ylabel("largest step |xi_{t+1} - xi_t|")
        left.set_title("fixed patterns settle at once; self-attention moves until it collapses")
        left.legend(fontsize=8)
        right.plot(its, trace["dist_fixed"], "o-", ms=3, label="fixed: max distance to stored patterns")
        right.plot(its, trace["dist_self"], "s-", ms=3, label="self-attention: max distance to stored patterns")
        right.plot(its, trace["diameter_self"], "k--", label="self-attention: cloud diameter")
        right.set_xlabel("iteration")
        right.set_title("self-attention loses the stored patterns; its cloud collapses")
        right.legend(fontsize=8)
        record.plots = save_figure(fig, ctx.out_dir, "d2_fixed_vs_changing.png")
    return record
