r"""``expattn simulate`` presets for expansion and contraction of clouds (claims B2, B3, B4; seed 000 §3.3).

The attention operator acts on a cloud of natural parameters token by token,
$\eta_t \mapsto [\eta_t +]\,\nabla G(\beta\eta_t)$ with the cloud itself as the carrier.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.dynamics.clouds import make_cloud
from expattn.dynamics.operators import AttentionConfig, AttentionUpdate, Compose
from expattn.dynamics.run import run
from expattn.nn.norms import NormConfig, build_norm
from expattn.presets.b_rules import (
    KINDS,
    ROUNDING,
    SYMMETRIC,
    expansion_table,
    judge_expansion,
    judge_normalization,
)
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record

FLOOR = 1e-13  # a diameter this small relative to its start is a point in float64


@register_preset
class Collapse(Preset):
    r"""B2: pure self-attention, $x_t \mapsto \nabla G(\beta x_t)$ on Gaussian clouds ``(batch, token, dim)``,
    never grows the diameter; at the smallest beta every cloud collapses to a point (float64 floor).

    Negative control through the same monotonicity rule: the same clouds and steps with the residual kept.
    """

    claim = "B2"
    name = "b2-collapse"
    method = (
        "Gaussian clouds (64 tokens, D=8), pure self-attention at beta in {0.1, 0.3, 1, 4}, 200 steps; diameter "
        "at every step (exact monotonicity) and its per-step collapse rate"
    )
    single_thread = True

    sizes = Sizes(quick=dict(batch=3, tokens=24, dim=8, steps=40), full=dict(batch=8, tokens=64, dim=8, steps=200))
    betas = (0.1, 0.3, 1.0, 4.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``curves[beta]``: diameter / initial diameter ``(steps + 1, batch)``; ``table`` per beta; ``worst``,
        the largest one-step growth; ``worst_res``, the same with the residual kept."""
        gen = generator(ctx.seed)
        curves, table, worst = {}, {}, 0.0
        for beta in self.betas:
            x = make_cloud("gaussian", n.batch, n.tokens, n.dim, gen)
            traj = run(x, AttentionUpdate(AttentionConfig(beta=beta, residual=False)), n.steps, metrics=["diameter"])
            rel = traj.metrics["diameter"] / traj.metrics["diameter"][0]  # (steps + 1, batch)
            worst = max(worst, float((rel[1:] - rel[:-1]).max()))
            curves[beta] = rel
            # Per-step rate until the diameter reaches the float64 floor (1e-13 of its start).
            above = (rel > FLOOR).sum(0) - 1  # last step above the floor
            rate = rel[above, torch.arange(n.batch)] ** (1 / above.clamp_min(1).double())
            table[f"beta={beta:g}"] = {
                "median_final_relative_diameter": float(rel[-1].median()),
                "median_rate_per_step": float(rate.median()),
                "collapsed_to_float_floor": int((rel[-1] <= FLOOR).sum()),
                "clouds": n.batch,
            }
        # Negative control through the same monotonicity rule: the same clouds and steps with the residual kept.
        x = make_cloud("gaussian", n.batch, n.tokens, n.dim, gen)
        grown = run(x, AttentionUpdate(AttentionConfig(beta=1.0, residual=True)), n.steps, metrics=["diameter"])
        rel_res = grown.metrics["diameter"] / grown.metrics["diameter"][0]
        worst_res = float((rel_res[1:] - rel_res[:-1]).max())
        return dict(curves=curves, table=table, worst=worst, worst_res=worst_res, batch=n.batch, tokens=n.tokens,
                    steps=n.steps)

    def judge(self, measured: Measured) -> Record:
        """B2's Record: the diameter never grows, every cloud shrinks, beta = 0.1 collapses; residual as control."""
        curves, table, worst, batch = measured["curves"], measured["table"], measured["worst"], measured["batch"]
        betas, steps, worst_res = self.betas, measured["steps"], measured["worst_res"]
        control = Control("with the residual (x + attention), beta = 1", "negative",
                          "pass" if worst_res <= ROUNDING else "fail",
                          {"max_diameter_increase_over_initial": worst_res, "tolerance": ROUNDING})
        first = table[f"beta={betas[0]:g}"]
        shrank = all(float(curves[b][-1].max()) < 1 for b in betas)
        ok = worst <= ROUNDING and first["collapsed_to_float_floor"] == batch and shrank
        slow = [k for k, v in table.items() if v["collapsed_to_float_floor"] < batch]
        return Record(
            id="B2",
            kind="dynamics",
            verdict="pass" if ok else "fail",
            metrics={"max_diameter_increase_over_initial": worst, "tolerance": ROUNDING, "steps": steps,
                     "tokens": measured["tokens"]},
            details={"per_beta": table},
            criterion=f"pass iff no step grows the diameter by more than {ROUNDING:g} of its initial value, every "
            f"cloud ends smaller than it started and at beta = {betas[0]:g} every cloud collapses below {FLOOR:g}; "
            "the residual step, judged by the same monotonicity rule, must fail",
            controls=[control],
            notes=f"The diameter never grew by more than {worst:.1e} of its initial value in one step; "
            f"{'every' if shrank else 'not every'} cloud shrank; at beta={betas[0]:g} "
            f"{first['collapsed_to_float_floor']}/{batch} clouds collapsed to a point (diameter below {FLOOR:g} of "
            "its start). "
            + (f"Not collapsed within {steps} steps: {', '.join(slow)}: tokens first gather in a few clusters "
               "whose mutual attention is exponentially small in beta, so the final merge is very slow." if slow
               else ""),
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Relative diameter per step, median and min-max band per beta, on log and linear scales."""
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        for beta, rel in measured["curves"].items():
            med = rel.median(-1).values.numpy()
            for ax in (left, right):
                line = ax.plot(med, label=f"beta = {beta:g} (median)")
                ax.fill_between(range(len(med)), rel.amin(-1), rel.amax(-1), alpha=0.2, color=line[0].get_color())
        left.set_yscale("log")
        left.set_ylim(1e-16, 2)
        left.set_xlim(0, 20)
        left.set_title("fast collapse at small beta (log scale)")
        right.set_title("slow, monotone shrinking at large beta (linear)")
        right.set_ylim(0.75, 1.01)
        for ax in (left, right):
            ax.set_xlabel("step")
            ax.set_ylabel("diameter / initial diameter (band: min-max over clouds)")
        left.legend(fontsize=8)
        fig.suptitle("B2: pure self-attention never grows the diameter")
        return save_figure(fig, out_dir, "b2_collapse.png")


@register_preset
class Expansion(Preset):
    r"""B3: $\operatorname{tr}\operatorname{Cov}(x + \nabla G(\beta x)) / \operatorname{tr}\operatorname{Cov}(x) > 1$
    for centred radially symmetric clouds ``(batch, token, dim)``, judged by ``judge_expansion``.

    Negative control: the same clouds and settings without the residual, $x \mapsto \nabla G(\beta x)$,
    a convex combination that shrinks the cloud (ratio of order $\beta^2$ at small beta); the rule must fail.
    """

    claim = "B3"
    name = "b3-expansion"
    method = (
        "one residual self-attention step on 100 clouds of 64 tokens per setting, D in {2, 16}, "
        "beta in {0.01, 0.1, 1, 10}; ratio of trace of covariance with a 95% interval over clouds, also "
        "mean distance to the centroid and fitted-Gaussian entropy; contrasted with non-symmetric clouds"
    )
    single_thread = True

    sizes = Sizes(quick=dict(batch=10, tokens=32), full=dict(batch=100, tokens=64))
    dims, betas = (2, 16), (0.01, 0.1, 1.0, 10.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``expansion_table`` with the residual (``table``, ``min_ratio``, ``weak``) and without (``plain``,
        ``plain_min``): per cloud kind, D and beta, the trace-of-covariance ratios over ``batch`` clouds."""
        gen = generator(ctx.seed)
        table, min_ratio, weak = expansion_table(gen, n.batch, n.tokens, residual=True)
        plain, plain_min, _ = expansion_table(gen, n.batch, n.tokens, residual=False)
        return dict(table=table, min_ratio=min_ratio, weak=weak, plain=plain, plain_min=plain_min, batch=n.batch,
                    tokens=n.tokens)

    def judge(self, measured: Measured) -> Record:
        """B3's Record: ``judge_expansion`` on the symmetric clouds; the step without the residual as control."""
        table, min_ratio, weak, plain_min = (measured[k] for k in ("table", "min_ratio", "weak", "plain_min"))
        verdict, lower = judge_expansion(table, min_ratio, SYMMETRIC)
        plain_verdict, plain_lower = judge_expansion(measured["plain"], plain_min, SYMMETRIC)
        control = Control("without the residual (x -> attention(x))", "negative", plain_verdict,
                          {"symmetric_lowest_q025_trace_ratio": plain_lower, "min_trace_ratio_any_cloud": plain_min})
        return Record(
            id="B3",
            kind="dynamics",
            verdict=verdict,
            metrics={
                "symmetric_lowest_q025_trace_ratio": lower,
                "min_trace_ratio_any_cloud": min_ratio,
                "clouds_per_setting": measured["batch"],
                "tokens": measured["tokens"],
            },
            details={"per_setting": table, "no_visible_expansion": weak},
            criterion="pass iff over the gaussian and sphere clouds (every D and beta) the lowest 2.5% quantile of "
            f"the trace-of-covariance ratio exceeds 1 and no cloud of any kind has a ratio below 1 - {ROUNDING:g}; "
            "the step without the residual, judged by the same rule, must fail",
            controls=[control],
            notes="Centred radially symmetric clouds expand in every setting (lowest 2.5% quantile of the "
            f"trace ratio {lower:.4f}). No cloud of any kind ever shrank in trace of covariance (min ratio "
            f"{min_ratio:.6f}): grad G is monotone, so the cross term sum_(s,t) (eta_s - eta_t).(g_s - g_t) >= 0. "
            "Where it fails: the expansion vanishes (median distance ratio < 1.01) for "
            + (", ".join(weak) if weak else "no setting")
            + ". Two mechanisms: at tiny beta the step is eta + mean + beta Cov eta, an expansion of order beta; "
            "for off-centre clouds every token attends mostly to the same extreme tokens, so the step is close "
            "to a common translation (ratio near 1; see the lower quantiles of offcentre at large beta). Without "
            f"the residual the smallest trace ratio is {plain_min:.1e}.",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Median trace ratio with its 95% band against beta, one panel per D, one line per cloud kind."""
        table, betas = measured["table"], self.betas
        plt = pyplot()
        fig, axes = plt.subplots(1, len(self.dims), figsize=(11, 4.2), sharey=True)
        for ax, dim in zip(axes, self.dims, strict=True):
            for kind in KINDS:
                rows = [table[f"{kind}/D={dim}/beta={b:g}"]["trace_ratio"] for b in betas]
                med = np.array([r["median"] for r in rows])
                err = np.array([[r["median"] - r["q025"] for r in rows], [r["q975"] - r["median"] for r in rows]])
                ax.errorbar(betas, med, yerr=err, marker="o", capsize=3, label=kind)
            ax.axhline(1.0, color="k", lw=0.8, ls="--")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("beta")
            ax.set_title(f"D = {dim}")
        axes[0].set_ylabel("tr Cov after / before (median, 95% of clouds)")
        axes[0].legend(fontsize=8)
        fig.suptitle("B3: one residual attention step expands the cloud (ratio > 1)")
        return save_figure(fig, out_dir, "b3_expansion.png")


def settling(traj, operator, start_diameter: torch.Tensor) -> list[str]:
    """Where an iterated operator ends, per cloud: point, fixed point, 2-cycle, steady spread, growing or moving."""
    tail = traj.metrics["trace_cov"][-max(2, len(traj.metrics["trace_cov"]) // 5) :]
    with torch.no_grad():
        twice = operator(operator(traj.final))
    period2 = (twice - traj.final).flatten(1).norm(dim=-1) / traj.final.flatten(1).norm(dim=-1)
    diam = traj.metrics["diameter"][-1]
    out = []
    for i in range(traj.final.shape[0]):
        spread = float(tail[:, i].amax() / tail[:, i].amin().clamp_min(1e-300))
        if float(diam[i]) < FLOOR * float(start_diameter[i]):
            out.append("point")
        elif float(traj.step_change[-1, i]) < 1e-8:
            out.append("fixed point")
        elif float(period2[i]) < 1e-8:
            out.append("2-cycle")
        elif spread < 1.1:
            out.append("steady spread")
        elif float(tail[-1, i]) > 1.1 * float(tail[0, i]):
            out.append("growing")
        else:
            out.append("moving")
    return out


@register_preset
class Normalization(Preset):
    r"""B4: $\operatorname{spread}(N(A(x))) < \operatorname{spread}(A(x))$ for each normalization $N$ and
    $\operatorname{tr}\operatorname{Cov}((N\circ A)^k(x))$ bounded, clouds ``(batch, token, dim)``, judged by
    ``judge_normalization``.

    Negative control: $N$ = identity (no normalization), run in the same loop; attention alone expands
    without bound, so the rule must fail on its rows.
    """

    claim = "B4"
    name = "b4-normalization"
    method = (
        "Gaussian clouds (64 tokens, D=16), beta in {0.1, 1}: contraction factor (spread after/before) of "
        "each normalization on the expanded cloud A(x), then 150 steps of N∘A and where they settle"
    )
    single_thread = True

    sizes = Sizes(quick=dict(batch=2, tokens=32, dim=16, steps=40), full=dict(batch=6, tokens=64, dim=16, steps=150))
    names = ("identity", "layernorm", "rmsnorm", "sphere", "whitening")
    betas = (0.1, 1.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``table`` per normalization and beta (contraction factors, trace of covariance, where N o A settles),
        ``curves[(beta, name)]``: median trace of covariance per step ``(steps + 1,)``; ``worst``: the largest
        contraction factor of a normalization other than the identity."""
        gen = generator(ctx.seed)
        config = NormConfig(dim=n.dim, radius=math.sqrt(n.dim))
        table, curves, worst = {}, {}, 0.0
        for beta in self.betas:
            attention = AttentionUpdate(AttentionConfig(beta=beta))
            x = make_cloud("gaussian", n.batch, n.tokens, n.dim, gen)
            for name in self.names:
                norm = build_norm(name, config)
                factor = norm.contraction(attention(x))
                if name != "identity":
                    worst = max(worst, float(factor.max()))
                operator = Compose(attention, norm)
                n_steps = min(n.steps, 12) if name == "identity" else n.steps  # identity diverges geometrically
                traj = run(x, operator, n_steps, metrics=["trace_cov", "diameter", "mean_pairwise_cosine"])
                ends = settling(traj, operator, traj.metrics["diameter"][0])
                tr = traj.metrics["trace_cov"]
                curves[(beta, name)] = traj.metrics["trace_cov"].median(-1).values
                table[f"{name}/beta={beta:g}"] = {
                    "contraction_factor_mean": float(factor.mean()),
                    "contraction_factor_max": float(factor.max()),
                    "final_trace_cov_median": float(traj.metrics["trace_cov"][-1].median()),
                    "trace_cov_growth_median": float((tr[-1] / tr[0]).median()),
                    "final_step_change_max": float(traj.step_change[-1].max()),
                    "final_mean_pairwise_cosine": float(traj.metrics["mean_pairwise_cosine"][-1].median()),
                    "steps": n_steps,
                    "settles_as": {e: ends.count(e) for e in sorted(set(ends))},
                }
        return dict(table=table, curves=curves, worst=worst, batch=n.batch, tokens=n.tokens, dim=n.dim,
                    steps=n.steps)

    def judge(self, measured: Measured) -> Record:
        """B4's Record: ``judge_normalization`` on every normalization but the identity, the control."""
        table, worst, dim, names = measured["table"], measured["worst"], measured["dim"], self.names
        rows = {n: [table[f"{n}/beta={b:g}"] for b in self.betas] for n in names}
        verdict = judge_normalization([r for n in names[1:] for r in rows[n]], dim)
        control = Control("no normalization (identity)", "negative", judge_normalization(rows["identity"], dim),
                          {"max_contraction_factor": max(r["contraction_factor_max"] for r in rows["identity"]),
                           "max_final_trace_cov_median": max(r["final_trace_cov_median"] for r in rows["identity"])})
        summary = "; ".join(f"{k}: {v['settles_as']}" for k, v in table.items() if not k.startswith("identity"))
        return Record(
            id="B4",
            kind="dynamics",
            verdict=verdict,
            metrics={"max_contraction_factor": worst, "clouds": measured["batch"], "tokens": measured["tokens"],
                     "dim": dim, "steps": measured["steps"]},
            details={"per_normalization": table},
            criterion="pass iff for layernorm, rmsnorm, sphere and whitening at beta 0.1 and 1 every contraction "
            f"factor spread(N(A(x))) / spread(A(x)) is below 1 and the median final trace of covariance of N o A is "
            f"at most 2 D = {2 * dim}; the identity in place of N, judged by the same rule, must fail",
            controls=[control],
            notes=f"Every normalization shrinks the expanded cloud (largest factor {worst:.3f}); without one the "
            f"trace of covariance grows {table['identity/beta=1']['trace_cov_growth_median']:.1e}-fold in "
            f"{table['identity/beta=1']['steps']} steps. Where N∘A settles: {summary}. 'point' is rank "
            "collapse (all tokens equal); whitening keeps the covariance fixed so it cannot collapse. RMSNorm "
            "without weights equals the projection to the sphere of radius sqrt(D), so their rows coincide.",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Median trace of covariance per step of N o A, one panel per beta, one line per normalization."""
        plt = pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
        for ax, beta in zip(axes, self.betas, strict=True):
            for name in self.names:
                ax.semilogy(measured["curves"][(beta, name)].clamp_min(1e-30).numpy(), label=name)
            ax.set_title(f"beta = {beta:g}")
            ax.set_xlabel("step of N∘A")
            ax.set_ylim(1e-30, 1e12)
        axes[0].set_ylabel("trace of covariance (median over clouds)")
        axes[0].legend(fontsize=8)
        fig.suptitle("B4: attention alone expands without bound; with a normalization the spread stays bounded "
                     "(at small beta the per-token norms collapse it to a point)")
        return save_figure(fig, out_dir, "b4_normalization.png")
