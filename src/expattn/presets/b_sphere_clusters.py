r"""``expattn simulate`` preset: attention dynamics on the sphere form clusters (seed 000 §3.3)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np

from expattn.catalogue.registry import RunContext
from expattn.checks.tools import generator
from expattn.presets.b_rules import (
    cluster_counts,
    judge_clusters,
)
from expattn.presets.base import Measured, Preset, Sizes, register_preset
from expattn.results.plotting import pyplot, save_figure
from expattn.results.record import Control, Record


@register_preset
class SphereClusters(Preset):
    r"""sphere-clusters: $x_t \leftarrow P_{S^2}(x_t + 0.1\,\nabla G(\beta x_t))$ on ``(batch, token, 3)``; the
    median number of clusters after the last step rises with beta, judged by ``judge_clusters``.

    Negative control: the same iteration with the step's sign turned, $x_t - 0.1\,\nabla G(\beta x_t)$
    (tokens repel), where no clusters form at any beta; the rule must fail.
    """

    claim = "B4"
    name = "sphere-clusters"
    method = (
        "64 tokens uniform on the unit sphere in D=3, x <- x + 0.1 attention(beta x) then project, "
        "400 steps, beta in {1, 4, 16, 64}; clusters = connected groups closer than 0.01"
    )
    statement = (
        "Tokens projected to the sphere after every residual self-attention step gather in clusters; "
        "the larger beta, the more clusters at a given time (Geshkovski et al. 2023)"
    )
    source = (
        "seed 000 §3.3 (normalization as the contraction, C2); Geshkovski, Letrouit, Polyanskiy, Rigollet, "
        "'The emergence of clusters in self-attention dynamics', NeurIPS 2023"
    )
    single_thread = True

    sizes = Sizes(quick=dict(batch=2, tokens=32, steps=120), full=dict(batch=4, tokens=64, steps=400))
    betas = (1.0, 4.0, 16.0, 64.0)

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """``counts[beta]``: [(step, clusters per cloud)], ``finals[beta]``: the last tokens ``(batch, token, 3)``,
        and ``repelled``: the counts of the repelling step."""
        gen = generator(ctx.seed)
        counts, finals = cluster_counts(gen, self.betas, n.batch, n.tokens, n.steps)
        repelled, _ = cluster_counts(gen, self.betas, n.batch, n.tokens, n.steps, repel=True)
        return dict(counts=counts, finals=finals, repelled=repelled, tokens=n.tokens, steps=n.steps)

    def judge(self, measured: Measured) -> Record:
        """sphere-clusters' Record: ``judge_clusters`` on the median clusters; the repelling step as control."""
        betas, counts, steps = self.betas, measured["counts"], measured["steps"]
        final = {b: float(np.median(h[-1][1])) for b, h in counts.items()}
        medians = [final[b] for b in betas]
        repelled_medians = [float(np.median(measured["repelled"][b][-1][1])) for b in betas]
        control = Control("tokens repel (x - 0.1 attention(beta x))", "negative", judge_clusters(repelled_medians),
                          {f"clusters_beta_{b:g}": m for b, m in zip(betas, repelled_medians, strict=True)})
        return Record(
            id="B4",
            kind="dynamics",
            verdict=judge_clusters(medians),
            metrics={f"clusters_beta_{b:g}": final[b] for b in betas} | {"tokens": measured["tokens"], "steps": steps},
            criterion="pass iff the median number of clusters (connected groups closer than 0.01) after the last "
            "step never decreases from beta = 1 to 4, 16, 64 and is strictly larger at 64 than at 1; the repelling "
            "step, judged by the same rule, must fail",
            controls=[control],
            details={"clusters_per_step": {f"beta={b:g}": [[k, c] for k, c in h] for b, h in counts.items()}},
            notes="Median number of clusters after "
            f"{steps} steps (time {0.1 * steps:g}): "
            + ", ".join(f"beta={b:g}: {final[b]:g}" for b in betas)
            + ". Filed under B4 (not B2): the residual is kept and it is the projection to the sphere, a "
            "normalization composed with attention, that makes the dynamics settle into clusters instead of "
            "expanding; larger beta gives more, longer-lived clusters (metastability), as Geshkovski et al. "
            "describe.",
        )

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Clusters per step for each beta, and the final tokens on the sphere at the second-largest beta."""
        plt = pyplot()
        fig = plt.figure(figsize=(11, 4.4))
        left = fig.add_subplot(1, 2, 1)
        for beta, history in measured["counts"].items():
            left.plot([k for k, _ in history], [np.median(c) for _, c in history], label=f"beta = {beta:g}")
        left.set_yscale("log")
        left.set_xlabel("step (time = 0.1 x step)")
        left.set_ylabel("number of clusters (median over clouds)")
        left.legend(fontsize=8)
        left.set_title("clusters per beta")
        right = fig.add_subplot(1, 2, 2, projection="3d")
        pts = measured["finals"][self.betas[-2]][0].numpy()
        right.scatter(pts[:, 0], pts[:, 1], pts[:, 2], s=18)
        right.set_title(f"final tokens on the sphere, beta = {self.betas[-2]:g}")
        fig.suptitle("Self-attention + projection to the sphere: tokens cluster (Geshkovski et al. 2023)")
        return save_figure(fig, out_dir, "sphere_clusters.png")
