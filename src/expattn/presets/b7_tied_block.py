r"""B7 preset: a tied-weight post-LN block iterated to its fixed point, against Broyden's method.

$$x_{k+1} = f(x_k),\qquad f = \mathrm{LN}\circ(\mathrm{id} + \mathrm{FFN})\circ\mathrm{LN}\circ(\mathrm{id}
+ \mathrm{attention}_W)$$

on ``(batch, tokens, D)`` clouds; the rule and the no-fixed-point control live in ``b_rules``.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import torch

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.dynamics.operators import AttentionConfig, AttentionUpdate, Compose, FeedForward, FeedForwardConfig
from expattn.nn.norms import NormConfig, build_norm
from expattn.presets.b_rules import FIXED_TOL, CyclicShift, fixed_point_row, judge_fixed_point
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record


def tied_block(dim: int, gain: float, gen: torch.Generator, seed: int) -> Compose:
    """Post-LN block with values = keys: LN(y + FFN(y)), y = LN(x + attention_W(x)), W ~ gain N(0, 1/D)."""
    query_map = gain * torch.randn(dim, dim, generator=gen, dtype=torch.float64) / math.sqrt(dim)
    norm = build_norm("layernorm", NormConfig(dim=dim))
    return Compose(
        AttentionUpdate(AttentionConfig(beta=1 / math.sqrt(dim)), query_map=query_map),
        norm,
        FeedForward(FeedForwardConfig(dim=dim, hidden=4 * dim, gain=gain, seed=seed)),
        norm,
    )


@register_preset
class TiedBlock(Preset):
    r"""B7: a tied-weight post-LN block $f$ on ``(batch, tokens, D)`` has a fixed point $x^* = f(x^*)$ that plain
    iteration and Broyden's method both find, for some weight gain; judged by ``judge_fixed_point``.

    Negative control through the same rule: $\mathrm{LN}\circ$``CyclicShift``, which has no fixed point (a fixed
    point would be constant across channels, which LayerNorm maps to zero), iterated and solved the same way.
    """

    claim = "B7"
    name = "b7-tied-block"
    method = (
        "post-LN block (attention with a random W, MLP, LayerNorm), D=16, 32 tokens, weight gain in "
        "{0.1, 0.25, 0.5, 1, 2, 4}: 300 plain iterations vs Broyden's method (expattn.core.solvers) from the same start"
    )
    single_thread = True

    sizes = Sizes(quick=dict(batch=2, tokens=16, dim=8, iters=300), full=dict(batch=4, tokens=32, dim=16, iters=300))
    gains = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``table`` per gain (``fixed_point_row``), ``curves[gain]``: step change per iteration, and the cyclic
        shift's ``control_row``."""
        gen = generator(ctx.seed)
        table, curves = {}, {}
        for i, gain in enumerate(self.gains):
            block = tied_block(n.dim, gain, gen, seed=ctx.seed + i)
            x = torch.randn(n.batch, n.tokens, n.dim, generator=gen, dtype=torch.float64)
            row = fixed_point_row(block, x, n.iters)
            curves[gain] = row.pop("step_change")
            table[f"gain={gain:g}"] = row
        shift = Compose(CyclicShift(), build_norm("layernorm", NormConfig(dim=n.dim)))
        x = torch.randn(n.batch, n.tokens, n.dim, generator=gen, dtype=torch.float64)
        control_row = fixed_point_row(shift, x, n.iters)
        return dict(table=table, curves=curves, control_row=control_row, batch=n.batch, tokens=n.tokens,
                    iters=n.iters)

    def judge(self, measured: Measured) -> Record:
        """B7's Record: ``judge_fixed_point`` over the gains; LayerNorm after a cyclic shift as control."""
        table, control_row, batch, iters = (measured[k] for k in ("table", "control_row", "batch", "iters"))
        verdict, agree = judge_fixed_point([{"name": k, **v} for k, v in table.items()], batch)
        control_verdict, _ = judge_fixed_point([{"name": "cyclic shift", **control_row}], batch)
        collapsed = all(v["final_token_spread"] < 1e-20 for v in table.values())
        never = [k for k, v in table.items() if v["iteration_reached_fixed_point"] == 0]
        mixed = [k for k in table if k not in agree and k not in never]
        return Record(
            id="B7",
            kind="dynamics",
            verdict=verdict,
            criterion=f"pass iff at some weight gain plain iteration settles (step change < 1e-8) in every cloud and "
            f"Broyden's residual and its relative distance from the iterate are below {FIXED_TOL:g}; LayerNorm after "
            "a cyclic shift of the channels (no fixed point), judged by the same rule, must fail",
            controls=[
                Control(
                    "LayerNorm o cyclic channel shift (no fixed point)",
                    "negative",
                    control_verdict,
                    {k: float(v) for k, v in control_row.items() if k != "step_change"},
                )
            ],
            metrics={"gains_with_fixed_point": len(agree), "gains": len(table), "iterations": iters,
                     "tokens": measured["tokens"]},
            details={"per_gain": table},
            notes=f"Fixed point reached by iteration and found directly by Broyden (residual and distance < 1e-6) at "
            f"{', '.join(agree) or 'no gain'}; not reached within {iters} iterations at "
            f"{', '.join(never) or 'no gain'}"
            + (f"; mixed (some clouds only, or Broyden elsewhere) at {', '.join(mixed)}. " if mixed else ". ")
            + (
                "At every gain the tokens first collapse to one common vector (final_token_spread below 1e-20: rank "
                "collapse), after which the block acts on that single vector; whether the iteration then settles "
                "depends on the weights, not monotonically on their size."
                if collapsed
                else "Token spread at the end is listed per gain."
            ),
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Step change per iteration (worst cloud), one line per gain."""
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7, 4.3))
        for gain, change in measured["curves"].items():
            ax.semilogy(change.clamp_min(1e-17).numpy(), label=f"gain = {gain:g}")
        ax.axhline(1e-8, color="k", lw=0.8, ls="--")
        ax.set_xlabel("iteration of the tied block")
        ax.set_ylabel("|x_(k+1) - x_k| / |x_k| (worst cloud)")
        ax.set_title("B7: iterating one tied-weight block: fixed point at some gains only")
        ax.legend(fontsize=8)
        return save_figure(fig, out_dir, "b7_tied_block.png")
