r"""D7 and B7 presets: attention as implicit energy minimisation (seed 004 §3; paper §4).

One explicit attention step $z_1 = f(x, x)$ against the fixed point $z^\star = f(z^\star, x)$ found by
a solver (``ImplicitAttention``), for Hopfield retrieval $f(\xi, X) = X^\top\operatorname{softmax}(\beta
X\xi)$ and for a random attention block with input injection and layer norm, and a tied-weight stack
$z_{l+1} = f(z_l, x)$ converging to the same fixed point at the rate of the Jacobian's spectral
radius (claim B7). Anderson against plain iteration is the preset of ``d7_anderson``.

Each preset states its rule in a ``judge_*`` function and runs it on a negative control, an input for
which the claim is false: correlated (unseparated) patterns for one-step retrieval, the phantom gradient
(an approximate inverse of $I - J$) for exact implicit gradients, and a block of spectral radius above 1
for the tied-weight stack.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import Tensor, nn

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.core.empirical import Empirical
from expattn.nn.implicit import ImplicitAttention, ImplicitConfig, InjectedAttention, spectral_radius, unrolled
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record


class HopfieldBlock(nn.Module):
    r"""$f(\xi, X) = X^\top \operatorname{softmax}(\beta X \xi)$: modern Hopfield retrieval (claim A3's mean)."""

    def __init__(self, beta: float) -> None:
        super().__init__()
        self.beta = beta

    def forward(self, z: Tensor, patterns: Tensor) -> Tensor:
        return Empirical(patterns).mean(self.beta * z)


def random_block(gen: torch.Generator, dim: int, heads: int, gain: float) -> InjectedAttention:
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    return InjectedAttention(dim, heads=heads, gain=gain).double()


def relative(a: Tensor, b: Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


ONE_STEP_TOL, AVERAGING_GAP = 1e-6, 1e-2  # one step "is" the solve / clearly is not (relative distance)
CORRELATED_SPREAD = 0.2  # noise of norm 0.2 on a shared unit direction: pairwise cosines ~0.96-0.98


def _hopfield_rows(patterns: Tensor, queries: Tensor, betas: list[float]) -> list[dict[str, float]]:
    r"""Per beta: relative gap $|f(\xi) - z^\star| / |z^\star|$ between one update and the Anderson fixed point,
    the solver's cost in evaluations of the update (one step is one), retrieval after one step and at the fixed
    point."""
    n = patterns.shape[-2]
    rows = []
    for beta in betas:
        block = HopfieldBlock(beta)
        layer = ImplicitAttention(block, ImplicitConfig(tol=1e-10, max_iter=500))
        with torch.no_grad():
            step = block(queries, patterns)
            fixed, stats = layer.forward_with_stats(patterns, z0=queries)
        target = torch.arange(n)
        hits = [(Empirical(patterns).probs(z).argmax(-1) == target).double().mean().item() for z in (step, fixed)]
        n_eff = 1.0 / (Empirical(patterns).probs(beta * fixed) ** 2).sum(-1)
        row = {
            "beta": beta,
            "gap": relative(step, fixed),
            "iterations": stats.forward.iterations,
            "evaluations": stats.forward.evaluations,
            "converged": stats.forward.converged,
            "retrieved_step": hits[0],
            "retrieved_fixed": hits[1],
            "patterns_averaged_at_fixed_point": n_eff.median().item(),
        }
        rows.append(row)
    return rows


def judge_hopfield(rows: list[dict[str, float]]) -> str:
    """``pass`` iff every solve converged, one update is within ``ONE_STEP_TOL`` (relative) of the fixed point
    at the largest beta and more than ``AVERAGING_GAP`` from it at the smallest; else ``fail``."""
    converged = all(r["converged"] for r in rows)
    return "pass" if converged and rows[-1]["gap"] < ONE_STEP_TOL and rows[0]["gap"] > AVERAGING_GAP else "fail"


def _hopfield_summary(rows: list[dict[str, float]]) -> dict[str, float]:
    return {"gap_smallest_beta": rows[0]["gap"], "gap_largest_beta": rows[-1]["gap"],
            "all_converged": float(all(r["converged"] for r in rows))}


@register_preset
class Hopfield(Preset):
    r"""D7 Hopfield: one explicit update $f(\xi) = X^\top\operatorname{softmax}(\beta X\xi)$ against the Anderson
    fixed point $z^\star = f(z^\star)$, for separated unit patterns ``(trials, N, d)``; judged by ``judge_hopfield``.

    Negative control: patterns at cosine ~0.98 to one shared direction are not separated, so even at the
    largest beta one update does not reach the fixed point (it lands near the patterns' average).
    """

    claim = "D7"
    name = "d7-hopfield"
    method = (
        "16 unit-norm patterns in d=32, queries = patterns + noise of norm 0.2, beta from 1 to 64; one update vs "
        "the Anderson fixed point (tol 1e-10, float64): gap, iterations, evaluations, retrieved pattern"
    )
    criterion = (
        f"pass iff every Anderson solve converges, one update is within {ONE_STEP_TOL:g} (relative) of the "
        f"fixed point at the largest beta and more than {AVERAGING_GAP:g} from it at the smallest; correlated patterns "
        "(not separated), judged by the same rule, must fail"
    )

    sizes = Sizes(quick=dict(trials=2, betas=[1.0, 4.0, 16.0, 64.0]),
                  full=dict(trials=8, betas=[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]))
    d, patterns = 32, 16

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``rows`` and ``control_rows`` (``_hopfield_rows``, one per beta), the betas and the number of queries."""
        gen = generator(ctx.seed)
        shape = (n.trials, self.patterns, self.d)
        patterns = torch.nn.functional.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)
        noise = torch.nn.functional.normalize(torch.randn(*shape, generator=gen, dtype=torch.float64), dim=-1)
        queries = patterns + 0.2 * noise
        rows = _hopfield_rows(patterns, queries, n.betas)
        shared = torch.nn.functional.normalize(torch.randn(n.trials, 1, self.d, generator=gen, dtype=torch.float64),
                                               dim=-1)
        close = torch.nn.functional.normalize(shared + CORRELATED_SPREAD * patterns, dim=-1)
        control_rows = _hopfield_rows(close, close + 0.2 * noise, n.betas)
        return dict(rows=rows, control_rows=control_rows, betas=n.betas, queries=n.trials * self.patterns)

    def judge(self, measured: Measured) -> Record:
        """D7's Record: ``judge_hopfield`` on the rows; correlated patterns as control."""
        rows, control_rows, betas = measured["rows"], measured["control_rows"], measured["betas"]
        control = Control("correlated patterns (cosine ~0.98 to a shared direction)", "negative",
                          judge_hopfield(control_rows), _hopfield_summary(control_rows))
        gaps = [r["gap"] for r in rows]
        converged = all(r["converged"] for r in rows)
        return Record(
            id="D7",
            kind="dynamics",
            verdict=judge_hopfield(rows),
            metrics={
                "gap_smallest_beta": gaps[0],
                "gap_largest_beta": gaps[-1],
                "evaluations_smallest_beta": rows[0]["evaluations"],
                "evaluations_largest_beta": rows[-1]["evaluations"],
                "queries": measured["queries"],
            },
            details={"rows": rows},
            controls=[control],
            notes=f"all solves converged: {converged}; one update is within {gaps[-1]:.1e} of the fixed point at "
            f"beta={betas[-1]:g} (separated patterns: one step is the solve) but {gaps[0]:.2f} away at "
            f"beta={betas[0]:g}, where the fixed point averages ~{rows[0]['patterns_averaged_at_fixed_point']:.1f} "
            f"patterns (median 1/sum p^2) and takes {rows[0]['evaluations']} evaluations; there one step retrieves "
            f"{100 * rows[0]['retrieved_step']:.0f}% of the queries and the fixed point "
            f"{100 * rows[0]['retrieved_fixed']:.0f}%; correlated patterns (control): one step is "
            f"{control_rows[-1]['gap']:.1e} from the fixed point at beta={betas[-1]:g}",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Gap of one step to the fixed point against beta (left); solver cost and retrieval (right)."""
        rows, betas = measured["rows"], measured["betas"]
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        left.loglog(betas, np.maximum([r["gap"] for r in rows], 1e-17), "o-")
        left.set_xlabel("beta")
        left.set_ylabel("|one step - fixed point| / |fixed point|")
        left.set_title("one explicit Hopfield step vs the fixed point")
        right.semilogx(betas, [r["evaluations"] for r in rows], "s-", label="solver evaluations (Anderson)")
        right.semilogx(betas, [100 * r["retrieved_step"] for r in rows], "^--", label="% retrieved, one step")
        right.semilogx(betas, [100 * r["retrieved_fixed"] for r in rows], "v:", label="% retrieved, fixed point")
        right.set_xlabel("beta")
        right.set_title("cost of the fixed point and retrieval")
        right.legend(fontsize=8)
        return save_figure(fig, out_dir, "d7_hopfield.png")


GRADIENT_TOL = 1e-7  # backward and forward solves at 1e-10: the gradient error is ~1e-10, far below


def judge_attention(converged: bool, grad_error: float) -> str:
    """``pass`` iff the solves converged and the gradient's relative error is below ``GRADIENT_TOL``."""
    return "pass" if converged and grad_error < GRADIENT_TOL else "fail"


@register_preset
class Attention(Preset):
    r"""D7 attention: a random block $f(z, x) = \mathrm{LN}(x + W_o\,\mathrm{attn}(z))$ on ``(batch, tokens, dim)``;
    one explicit step $f(x, x)$ against the fixed point $z^\star = f(z^\star, x)$ with each solver, and implicit
    gradients through $(I - J)^{-1}$ against backpropagation through the unrolled stack; judged by
    ``judge_attention``.

    Negative control: the phantom gradient replaces $(I - J)^{-1}$ by five damped steps, a wrong Jacobian inverse.
    """

    claim = "D7"
    name = "d7-attention"
    method = (
        "random attention block f(z,x) = LayerNorm(x + W_o attn(z)), d=32, 4 heads, 16 tokens, float64; one "
        "step f(x,x) vs the fixed point (tol 1e-10) with each solver; implicit vs unrolled and phantom gradients"
    )
    criterion = (
        f"pass iff every solver converges (forward and adjoint) and the implicit gradients agree with "
        f"backpropagation through the unrolled stack to {GRADIENT_TOL:g} (largest relative error over the inputs and "
        "parameters); the phantom gradient (5 steps), judged by the same rule, must fail"
    )

    sizes = Sizes(quick=dict(batch=2, tokens=8, dim=16), full=dict(batch=8, tokens=16, dim=32))
    solvers = ("fixed_point_iter", "anderson", "broyden")

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """Per solver its residual ``traces`` and cost (``solvers``); the last solver's fixed point's gap to one
        step, the Jacobian's spectral radius ``rho``, the unrolled ``depth``, the implicit and phantom gradients'
        largest relative errors."""
        gen = generator(ctx.seed)
        block = random_block(gen, n.dim, 4, gain=1.0)
        x = torch.randn(n.batch, n.tokens, n.dim, generator=gen, dtype=torch.float64, requires_grad=True)
        weight = torch.randn(n.batch, n.tokens, n.dim, generator=gen, dtype=torch.float64)
        params = [x, *block.parameters()]
        traces, solvers = {}, {}
        for name in self.solvers:
            layer = ImplicitAttention(block, ImplicitConfig(solver=name, tol=1e-10, backward_tol=1e-10, max_iter=500))
            z, stats = layer.forward_with_stats(x)
            grads = torch.autograd.grad((z * weight).sum(), params)
            traces[name] = stats.forward.trace
            solvers[name] = {
                "iterations": stats.forward.iterations,
                "evaluations": stats.forward.evaluations,
                "converged": stats.forward.converged and stats.backward.converged,
            }
        with torch.no_grad():
            step = block(x, x)
        rho = spectral_radius(lambda s: block(s, x.detach()), z.detach(), iters=100, generator=gen).max().item()
        depth = math.ceil(math.log(1e-13) / math.log(min(rho * 1.2, 0.95)))
        reference = torch.autograd.grad((unrolled(block, x, x, depth) * weight).sum(), params)
        phantom = ImplicitAttention(block, ImplicitConfig(tol=1e-10, backward="phantom", phantom_steps=5))
        phantom_grads = torch.autograd.grad((phantom(x) * weight).sum(), params)

        def error(gs: tuple[Tensor, ...]) -> float:
            return max(relative(g, r) for g, r in zip(gs, reference, strict=True))

        grad_error, phantom_error = error(grads), error(phantom_grads)
        return dict(traces=traces, solvers=solvers, gap=relative(step, z.detach()), rho=rho, depth=depth,
                    grad_error=grad_error, phantom_error=phantom_error)

    def judge(self, measured: Measured) -> Record:
        """D7's Record: ``judge_attention`` on the implicit gradient; the phantom gradient as control."""
        solvers, gap, rho, depth = measured["solvers"], measured["gap"], measured["rho"], measured["depth"]
        grad_error, phantom_error = measured["grad_error"], measured["phantom_error"]
        converged = all(s["converged"] for s in solvers.values())
        control = Control("phantom gradient, 5 steps (approximate inverse of I - J)", "negative",
                          judge_attention(converged, phantom_error),
                          {"grad_error": phantom_error, "tolerance": GRADIENT_TOL})
        return Record(
            id="D7",
            kind="dynamics",
            verdict=judge_attention(converged, grad_error),
            controls=[control],
            metrics={
                "one_step_gap": gap,
                "spectral_radius": rho,
                "implicit_vs_unrolled_grad_error": grad_error,
                "phantom5_vs_unrolled_grad_error": phantom_error,
                "unrolled_depth": depth,
                **{f"evaluations_{k}": v["evaluations"] for k, v in solvers.items()},
            },
            details={"solvers": solvers, "traces": {k: list(v) for k, v in measured["traces"].items()}},
            notes=f"one explicit step is {gap:.2f} (relative) from the fixed point; the Jacobian's "
            f"spectral radius there is {rho:.2f}; implicit gradients agree with backpropagation through {depth} "
            f"unrolled steps to {grad_error:.1e} (phantom, 5 steps: {phantom_error:.1e})",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Relative residual per function evaluation, one line per solver."""
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, trace in measured["traces"].items():
            ax.semilogy(range(1, len(trace) + 1), trace, "o-", ms=3, label=name)
        ax.axhline(1e-10, color="gray", ls=":", label="tolerance")
        ax.set_xlabel("function evaluations")
        ax.set_ylabel("relative residual |f(z) - z| / |f(z)|")
        ax.set_title(f"fixed point of a random attention block (rho = {measured['rho']:.2f})")
        ax.legend(fontsize=8)
        return save_figure(fig, out_dir, "d7_attention.png")
