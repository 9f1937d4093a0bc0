r"""``expattn simulate`` preset D7: a stack of tied-weight implicit attention blocks."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.nn.implicit import ImplicitAttention, ImplicitConfig, spectral_radius
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.presets.d7_implicit import random_block, relative
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record

B7_STATEMENT = (
    "A block with tied weights applied repeatedly is one operator iterated; its fixed point can be solved for"
)


def _stack(block: nn.Module, x: Tensor, depth: int, gen: torch.Generator) -> dict[str, object]:
    """Distances of a tied-weight stack to the solver's fixed point, the fitted rate and the spectral radius."""
    with torch.no_grad():
        z_star, stats = ImplicitAttention(block, ImplicitConfig(tol=1e-13, max_iter=1000)).forward_with_stats(x)
        z, distance = x, []
        for _ in range(depth):
            z = block(z, x)
            distance.append(relative(z, z_star))
    rho = spectral_radius(lambda s: block(s, x), z_star, iters=200, generator=gen).max().item()
    dist = np.array(distance)
    fit = (dist > 1e-11) & (np.arange(depth) >= 3)  # past the first layers' transient, above round-off
    rate = float(np.exp(np.polyfit(np.arange(depth)[fit], np.log(dist[fit]), 1)[0])) if fit.sum() >= 3 else math.nan
    return {"distance": distance, "rho": rho, "rate": rate, "converged": stats.forward.converged,
            "evaluations": stats.forward.evaluations}


STACK_TOL = 1e-9  # distance after the stack; rho ~0.35 over 60+ layers reaches round-off (~1e-15)


def judge_stack(run: dict[str, object]) -> str:
    r"""``pass`` iff the solver converged, $\rho < 1$, the fitted per-layer rate is at most $1.1\rho$ and the
    last layer is within ``STACK_TOL`` (relative) of the fixed point; else ``fail``.

    Near a fixed point with Jacobian spectral radius $\rho < 1$ the error shrinks asymptotically at rate $\rho$
    for a generic start and faster when the start has little weight on the slowest direction, so the fitted rate
    is bounded above by $\rho$; 10% covers the power-iteration estimate of $\rho$."""
    ok = (run["converged"] and run["rho"] < 1 and run["rate"] <= 1.1 * run["rho"]
          and run["distance"][-1] < STACK_TOL)
    return "pass" if ok else "fail"


@register_preset
class TiedWeights(Preset):
    r"""B7 implicit: a tied-weight stack $z_{l+1} = f(z_l, x)$ of a random attention block on ``(batch, tokens,
    dim)`` approaches the solver's fixed point $z^\star$ at the rate of the Jacobian's spectral radius,
    $|z_l - z^\star| \sim \rho^l$; judged by ``judge_stack``.

    Negative control: at gain 4 the Jacobian's spectral radius exceeds 1, the stack does not approach the
    (unstable) fixed point the solver finds, and the same rule must reject it.
    """

    claim = "B7"
    name = "b7-implicit"
    method = (
        "random attention blocks (d=32, 4 heads, 16 tokens, float64) with gains 1 and 4, each stacked 80 times "
        "with tied weights; distance of layer l to the Anderson fixed point vs rho^l, rho by power iteration"
    )
    criterion = (
        f"pass iff at gain 1 the solver converges, rho < 1, the stack's fitted per-layer rate is at most "
        f"1.1 rho and its last layer is within {STACK_TOL:g} (relative) of the fixed point; the gain-4 block "
        "(rho > 1), judged by the same rule, must fail"
    )
    statement = B7_STATEMENT

    sizes = Sizes(quick=dict(batch=2, tokens=8, dim=16, depth=60), full=dict(batch=4, tokens=16, dim=32, depth=80))
    gains = (1.0, 4.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``runs[gain]``: ``_stack``'s distance per layer (``depth`` floats), rho, fitted rate, solver cost."""
        gen = generator(ctx.seed)
        x = torch.randn(n.batch, n.tokens, n.dim, generator=gen, dtype=torch.float64)
        runs = {gain: _stack(random_block(gen, n.dim, 4, gain), x, n.depth, gen) for gain in self.gains}
        return dict(runs=runs, depth=n.depth)

    def judge(self, measured: Measured) -> Record:
        """B7's Record: ``judge_stack`` at gain 1; gain 4 (rho > 1) as control."""
        runs, depth = measured["runs"], measured["depth"]
        low, high = runs[1.0], runs[4.0]
        control = Control("gain 4 (spectral radius above 1)", "negative", judge_stack(high),
                          {"spectral_radius": high["rho"], "final_distance": high["distance"][-1],
                           "solver_converged": float(high["converged"])})
        return Record(
            id="B7",
            kind="dynamics",
            verdict=judge_stack(low),
            controls=[control],
            metrics={
                "spectral_radius_gain1": low["rho"],
                "fitted_rate_gain1": low["rate"],
                "final_distance_gain1": low["distance"][-1],
                "solver_evaluations_gain1": low["evaluations"],
                "spectral_radius_gain4": high["rho"],
                "final_distance_gain4": high["distance"][-1],
                "solver_converged_gain4": float(high["converged"]),
                "depth": depth,
            },
            details={f"gain{g:g}": {"distance": r["distance"], "rate": r["rate"]} for g, r in runs.items()},
            notes=f"gain 1: the stack approaches the solver's fixed point at {low['rate']:.3f} per layer, the "
            f"spectral radius there is {low['rho']:.3f}, and the solver needs {low['evaluations']} evaluations; "
            f"gain 4: spectral radius {high['rho']:.2f}, after {depth} layers the stack is "
            f"{high['distance'][-1]:.2g} (relative) from the fixed point the solver found (converged: "
            f"{high['converged']})",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        r"""Distance to the fixed point per layer beside $\rho^l$, one pair of lines per gain."""
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        layers = np.arange(1, measured["depth"] + 1)
        for gain, run in measured["runs"].items():
            dist = np.maximum(np.array(run["distance"]), 1e-17)
            line = ax.semilogy(layers, dist, "o-", ms=3, label=f"gain {gain:g}: |z_l - z*| / |z*|")
            ax.semilogy(layers, dist[0] * run["rho"] ** (layers - 1), "--", color=line[0].get_color(),
                        label=f"gain {gain:g}: rho^l, rho = {run['rho']:.3f}")
        ax.set_ylim(1e-16, 1e3)
        ax.set_xlabel("layer l of the tied-weight stack")
        ax.set_ylabel("relative distance to the solver's fixed point")
        ax.set_title("a tied-weight stack is one operator iterated")
        ax.legend(fontsize=8)
        return save_figure(fig, out_dir, "b7_implicit.png")
