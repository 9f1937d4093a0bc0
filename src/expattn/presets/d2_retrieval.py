r"""D2 presets: retrieval with fixed stored patterns in the modern Hopfield network (seed 001).

The update is $\xi \leftarrow f(\xi) = X^\top \operatorname{softmax}(\beta X \xi)$ with the stored patterns
$x_j$ as rows of $X$; it is the mean of the empirical family with atoms $x_j$ at $\eta = \beta\xi$
(``expattn.core.hopfield.hopfield_update``, claim A3).

The bound used is Theorem 5 ("exponentially small retrieval error") of Ramsauer et al.,
*Hopfield Networks is All You Need*, ICLR 2021 (arXiv:2008.02217, §2): with separation
$\Delta_i = x_i^\top x_i - \max_{j \ne i} x_i^\top x_j$ and $M = \max_j |x_j|$,

$$|f(\xi) - x_i| \le 2 (N - 1)\, M \exp\big(-\beta(\Delta_i - 2 \max\{|\xi - x_i|, |x_i^* - x_i|\} M)\big).$$

The presets check the form with $|\xi - x_i|$ in place of the max, which is at least as strong and is
what the proof gives for any $\xi$: $\xi^\top(x_i - x_j) \ge \Delta_i - 2M|\xi - x_i|$ bounds the softmax
mass off pattern $i$ by $(N-1)e^{-\beta(\Delta_i - 2M|\xi - x_i|)}$, and $|f(\xi) - x_i| \le 2M$ times that mass.

Each preset's rule is a ``judge_*`` function, run also on a negative control for which the claim is false:
an update at half the beta of the bound, beta too small to retrieve, every pattern stored twice (no
single-pattern fixed points), and near-uniform attention that retrieves nothing.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.core.hopfield import hopfield_update
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.presets.d2_hopfield import (
    QUERY_COSINE,
    RETRIEVED,
    SLOPE_BAND,
    capacity_of,
    fixed_point_sweep,
    judge_capacity,
    judge_metastable,
    judge_one_step,
    retrieval_curves,
    separation,
    unit_rows,
)
from expattn.presets.d2_theorem3 import published
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record


@register_preset
class OneStepError(Preset):
    r"""D2 one-step error: $|f(\xi) - x_i|$ after one update from $\xi = x_i + $ noise, for ``(R, T, N, d)``
    patterns of R norms, never exceeds Theorem 5's bound $2(N-1)M e^{-\beta(\Delta_i - 2M|\xi - x_i|)}$ and falls
    exponentially in $\beta$ times the query's gap; judged by ``judge_one_step``.

    Negative control: the same draws updated at $\beta/2$, judged against the bound and gap at $\beta$.
    """

    claim = "D2"
    name = "d2-one-step-error"
    method = (
        "N=16 random patterns of norm r in d=32, queries x_i + 5% noise, one update, beta in {0.5,1,2,4}, "
        "8 radii; every error vs the Theorem 5 bound, and the slope of log error against beta * (query's gap)"
    )
    criterion = (
        f"pass iff no one-step error exceeds its Theorem 5 bound and the slope of log error against beta * "
        f"(the query's gap) lies in {list(SLOPE_BAND)}; the same draws updated at beta / 2, judged by the same rule "
        "against the bound at beta, must fail"
    )

    sizes = Sizes(quick=dict(trials=2, radii=5), full=dict(trials=8, radii=9))
    d, patterns, noise, betas = 32, 16, 0.05, (0.5, 1.0, 2.0, 4.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``rows`` per beta: (beta, error, bound, exponent, gap, M, Delta), each ``(R, T, N)`` (M ``(R, T, 1)``),
        and ``halved``: the errors of the beta / 2 update ``(beta, R, T, N)``."""
        gen = generator(ctx.seed)
        d, patterns, noise = self.d, self.patterns, self.noise
        radii = torch.linspace(0.5, 4.5, n.radii, dtype=torch.float64)
        rows, draws = [], []
        for beta in self.betas:
            shape = (len(radii), n.trials, patterns, d)
            r = radii.view(-1, 1, 1, 1)
            x = r * unit_rows(torch.randn(*shape, generator=gen, dtype=torch.float64))
            xi = x + noise * r * unit_rows(torch.randn(*shape, generator=gen, dtype=torch.float64))
            err = (hopfield_update(xi, x, beta) - x).norm(dim=-1)  # (R, T, N)
            m = x.norm(dim=-1).amax(-1, keepdim=True)
            delta = separation(x)  # (R, T, N)
            exponent = beta * (delta - 2 * (xi - x).norm(dim=-1) * m)
            bound = 2 * (patterns - 1) * m * torch.exp(-exponent)
            gap = beta * separation(x, xi)  # the query's own softmax gap
            rows.append((beta, err, bound, exponent, gap, m, delta))
            draws.append((x, xi))
        # Negative control: the same draws updated at beta / 2, judged against the bound and gap at beta.
        halved = torch.stack([(hopfield_update(xi, x, beta / 2) - x).norm(dim=-1)
                              for beta, (x, xi) in zip(self.betas, draws, strict=True)])
        return dict(rows=rows, halved=halved)

    def judge(self, measured: Measured) -> Record:
        """D2's Record: ``judge_one_step`` on errors ``(beta, R, T, N)``; the beta / 2 update as control."""
        rows = measured["rows"]
        errors = torch.stack([row[1] for row in rows])  # (beta, R, T, N)
        bounds = torch.stack([row[2] for row in rows])
        gaps = torch.stack([row[4] for row in rows])
        verdict, violations, slope = judge_one_step(errors, bounds, gaps)
        control_verdict, control_violations, control_slope = judge_one_step(measured["halved"], bounds, gaps)
        control = Control("update at beta / 2 (exponent halved)", "negative", control_verdict,
                          {"bound_violations": control_violations, "log_error_slope_vs_beta_gap": control_slope})
        return Record(
            id="D2",
            kind="dynamics",
            verdict=verdict,
            controls=[control],
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

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Scaled error against the bound's exponent (left) and median error and bound against separation."""
        rows, patterns = measured["rows"], self.patterns
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for beta, err, _, exponent, _, m, _ in rows:
            scaled = (err / (2 * (patterns - 1) * m)).flatten()
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
        return save_figure(fig, out_dir, "d2_one_step_error.png")


@register_preset
class Capacity(Preset):
    r"""D2 capacity: the fraction of cosine-0.5 queries that one update $f(\xi)$ brings within 0.1 of their
    pattern, against the number N of stored unit patterns, per d and beta; judged by ``judge_capacity``.

    Negative control: beta 64 times smaller, too small for one update to retrieve from a cosine-0.5 query.
    Theorem 3 of Ramsauer et al. in its own setting goes to ``details["published"]``.
    """

    claim = "D2"
    name = "d2-capacity"
    method = (
        "N = 2..2^13 unit-norm random patterns, d in {32, 64}, beta in {16,32,64,128}; queries at cosine 0.5 "
        "to a pattern; retrieved if one update lands within 0.1 of it; >= 128 queries per point"
    )
    criterion = (
        "pass iff the retrieved fraction never rises with N by more than 3 binomial standard errors, capacity "
        "(largest N with >= 90% retrieved) at the largest beta is larger in d=64 than in d=32, capacity never falls as "
        "beta grows, and >= 95% are retrieved at N=2 in d=64 at the largest beta; beta 64 times smaller, judged by the "
        "same rule, must fail"
    )

    sizes = Sizes(quick=dict(queries=32, doublings=10, published=(64, 12, 2000)),
                  full=dict(queries=128, doublings=13, published=(256, 16, 20000)))
    betas, dims = (16.0, 32.0, 64.0, 128.0), (32, 64)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``curves[(d, beta)]``: fraction retrieved per N in ``sizes`` (N = 2, 4, ..., 2^doublings), the same
        at beta / 64 (``control_curves``), and the ``published`` rows of Theorem 3."""
        gen = generator(ctx.seed)
        sizes = [2**k for k in range(1, n.doublings + 1)]
        curves = retrieval_curves(gen, sizes, self.betas, self.dims, n.queries)
        control_curves = retrieval_curves(gen, sizes, self.small, self.dims, n.queries)
        return dict(sizes=sizes, curves=curves, control_curves=control_curves, queries=n.queries,
                    published=published(gen, *n.published))

    @property
    def small(self) -> tuple[float, ...]:
        """The control's betas, 64 times smaller."""
        return tuple(b / 64 for b in self.betas)

    def judge(self, measured: Measured) -> Record:
        """D2's Record: ``judge_capacity`` on the retrieval curves; beta / 64 as control."""
        sizes, curves, queries = measured["sizes"], measured["curves"], measured["queries"]
        betas, dims = self.betas, self.dims
        verdict, flags = judge_capacity(curves, sizes, betas, dims, queries)
        grows_with_beta, grows_with_d, monotone = flags["grows_with_beta"], flags["grows_with_d"], flags["monotone"]
        caps = {f"capacity_d{d}_beta{b:g}": capacity_of(c, sizes) for (d, b), c in curves.items()}
        control_verdict, control_flags = judge_capacity(measured["control_curves"], sizes, self.small, dims, queries)
        control = Control(f"beta 64 times smaller ({', '.join(f'{b:g}' for b in self.small)})", "negative",
                          control_verdict, {k: float(v) for k, v in control_flags.items()})
        return Record(
            id="D2",
            kind="dynamics",
            verdict=verdict,
            metrics={**caps, "monotone_in_N": float(monotone), "queries_per_point": queries},
            details={"sizes": sizes, "fraction_retrieved": {f"d{d}_beta{b:g}": c for (d, b), c in curves.items()},
                     "published": measured["published"]},
            controls=[control],
            notes=f"one update retrieves (within {RETRIEVED}) from cosine-{QUERY_COSINE} queries until N ~ capacity; "
            f"capacity grows with beta ({grows_with_beta}) and with d ({grows_with_d}); fraction falls with N "
            f"({monotone}); Ramsauer et al.'s Theorem 3 in its own setting (patterns on the sphere of radius "
            "K sqrt(d-1)) is compared in details['published']",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Fraction retrieved against N, one line per d and beta."""
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        colors = dict(zip(self.betas, plt.rcParams["axes.prop_cycle"].by_key()["color"], strict=False))
        for (d, b), c in measured["curves"].items():
            ax.plot(measured["sizes"], c, "-" if d == 32 else "--", marker="o", ms=3, color=colors[b],
                    label=f"d={d}, beta={b:g}")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("number of stored patterns N")
        ax.set_ylabel(f"fraction retrieved after one update (error < {RETRIEVED})")
        ax.set_title("storage capacity: solid d = 32, dashed d = 64")
        ax.legend(fontsize=7, ncol=2)
        return save_figure(fig, out_dir, "d2_capacity.png")


@register_preset
class Metastable(Preset):
    r"""D2 metastable states: iterating $f$ from every stored pattern of 4 clusters of 8 to its fixed point, the
    number of patterns averaged there, $1/\sum_j p_j^2$, falls from N (global average) through the cluster size
    (metastable) to 1 (single pattern) as beta grows; judged by ``judge_metastable``.

    Negative control: every other pattern stored twice (4 distinct per cluster), so no fixed point is a single
    pattern: at large beta the softmax splits between the two copies and $1/\sum_j p_j^2$ stays at 2.
    """

    claim = "D2"
    name = "d2-metastable"
    method = (
        "4 clusters of 8 patterns (unit centres, spread 0.15) in d=32; iterate from every pattern to a fixed "
        "point for beta from 0.1 to 1000; effective number of averaged patterns 1/sum p^2; energy never rises"
    )
    criterion = (
        "pass iff the median number of averaged patterns (1/sum p^2 at the fixed point) exceeds 0.9 N at the "
        "smallest beta, is below 1.1 at the largest, lies within 0.5-1.5 cluster sizes at some beta, never rises by "
        "more than 0.05 N between betas, and every iteration converges without the energy rising; every pattern stored "
        "twice, judged by the same rule, must fail"
    )

    sizes = Sizes(quick=dict(betas=5), full=dict(betas=13))
    d, clusters, size = 32, 4, 8

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``betas`` (log-spaced 0.1 to 1000) and the ``fixed_point_sweep`` of the patterns ``(N, d)`` and of the
        doubled patterns (``control_sweep``)."""
        gen = generator(ctx.seed)
        d, clusters, size = self.d, self.clusters, self.size
        patterns = clusters * size
        centres = unit_rows(torch.randn(clusters, d, generator=gen, dtype=torch.float64))
        x = centres.repeat_interleave(size, 0) + 0.15 * unit_rows(
            torch.randn(patterns, d, generator=gen, dtype=torch.float64))
        betas = np.logspace(-1, 3, n.betas)
        sweep = fixed_point_sweep(x, betas)
        doubled = x[::2].repeat_interleave(2, 0)
        control_sweep = fixed_point_sweep(doubled, betas)
        return dict(betas=betas, sweep=sweep, control_sweep=control_sweep, patterns=patterns)

    def judge(self, measured: Measured) -> Record:
        """D2's Record: ``judge_metastable`` on the sweep; every pattern stored twice as control."""
        sweep, control_sweep, betas = measured["sweep"], measured["control_sweep"], measured["betas"]
        n, size = measured["patterns"], self.size
        median, low, high = sweep["n_eff_median"], sweep["n_eff_min"], sweep["n_eff_max"]
        worst_rise, worst_step = sweep["max_energy_rise"], sweep["max_final_step"]
        verdict, flags = judge_metastable(sweep, n, size)
        plateau = flags["plateau"]
        control_verdict, control_flags = judge_metastable(control_sweep, n, size)
        control = Control("every pattern stored twice (identical pairs)", "negative", control_verdict,
                          {"n_eff_largest_beta": control_sweep["n_eff_median"][-1],
                           **{k: float(v) for k, v in control_flags.items()}})
        return Record(
            id="D2",
            kind="dynamics",
            verdict=verdict,
            controls=[control],
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

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Patterns averaged at the fixed point against beta: median and min-max band over the starts."""
        sweep, betas, n, size = measured["sweep"], measured["betas"], measured["patterns"], self.size
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.fill_between(betas, sweep["n_eff_min"], sweep["n_eff_max"], alpha=0.25, label="min-max over the 32 starts")
        ax.plot(betas, sweep["n_eff_median"], "o-", label="median")
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
        return save_figure(fig, out_dir, "d2_metastable.png")
