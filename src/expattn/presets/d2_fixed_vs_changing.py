r"""``expattn simulate`` preset D2: Hopfield retrieval with fixed patterns against patterns that change."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.presets.d2_hopfield import (
    CONTROL_BETA,
    fixed_and_self_traces,
    judge_fixed_vs_changing,
    unit_rows,
)
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record


@register_preset
class FixedVsChanging(Preset):
    r"""D2 fixed vs changing patterns: with the patterns fixed, $\xi \leftarrow X^\top\operatorname{softmax}(\beta
    X\xi)$ retrieves a stored pattern in one update and settles; self-attention, whose patterns are the moving
    states themselves, leaves the stored patterns while its cloud contracts; judged by ``judge_fixed_vs_changing``.

    Negative control: at beta = ``CONTROL_BETA`` attention is near uniform, so the fixed patterns retrieve nothing.
    """

    claim = "D2"
    name = "d2-fixed-vs-changing"
    method = (
        "16 patterns of norm 3 in d=32, beta=1, queries = patterns + noise of norm 0.3; 60 iterations with the "
        "patterns fixed (Hopfield retrieval) vs self-attention whose patterns are the moving states (no residual)"
    )
    criterion = (
        "pass iff with the patterns fixed one update lands within 0.1 of every stored pattern and the "
        "iteration settles (last step < 1e-10), while self-attention ends more than 1.0 from the patterns with a cloud "
        f"smaller than at the start; beta = {CONTROL_BETA:g}, judged by the same rule, must fail"
    )

    sizes = Sizes(quick=dict(steps=30), full=dict(steps=60))
    d, patterns, beta = 32, 16, 1.0

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``trace`` and ``control_trace`` (``fixed_and_self_traces``: per iteration, ``steps`` floats each) and
        the start cloud's diameter."""
        gen = generator(ctx.seed)
        x = 3.0 * unit_rows(torch.randn(self.patterns, self.d, generator=gen, dtype=torch.float64))
        start = x + 0.3 * unit_rows(torch.randn(self.patterns, self.d, generator=gen, dtype=torch.float64))
        trace = fixed_and_self_traces(x, start, self.beta, n.steps)
        control_trace = fixed_and_self_traces(x, start, CONTROL_BETA, n.steps)
        return dict(trace=trace, control_trace=control_trace, diameter0=torch.cdist(start, start).max().item(),
                    steps=n.steps)

    def judge(self, measured: Measured) -> Record:
        """D2's Record: ``judge_fixed_vs_changing`` on the traces; near-uniform attention as control."""
        trace, control_trace, diameter0 = measured["trace"], measured["control_trace"], measured["diameter0"]
        one_step = trace["dist_fixed"][0]
        control = Control(f"beta = {CONTROL_BETA:g} (near-uniform attention)", "negative",
                          judge_fixed_vs_changing(control_trace, diameter0),
                          {"fixed_one_step_distance": control_trace["dist_fixed"][0],
                           "self_final_distance_to_patterns": control_trace["dist_self"][-1]})
        return Record(
            id="D2",
            kind="dynamics",
            verdict=judge_fixed_vs_changing(trace, diameter0),
            controls=[control],
            metrics={
                "fixed_one_step_distance": one_step,
                "fixed_final_step": trace["step_fixed"][-1],
                "self_final_distance_to_patterns": trace["dist_self"][-1],
                "self_diameter_ratio": trace["diameter_self"][-1] / diameter0,
                "iterations": measured["steps"],
            },
            details=trace,
            notes=f"fixed patterns: within {one_step:.2g} of the stored pattern after one update, then a fixed "
            f"point; changing patterns: the states leave the stored patterns (max distance "
            f"{trace['dist_self'][-1]:.2f}) while the cloud contracts (diameter "
            f"x{trace['diameter_self'][-1] / diameter0:.2f})",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Largest step per iteration (left) and distances to the stored patterns and diameter (right)."""
        trace = measured["trace"]
        plt = pyplot()
        fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
        its = np.arange(1, measured["steps"] + 1)
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
        return save_figure(fig, out_dir, "d2_fixed_vs_changing.png")
