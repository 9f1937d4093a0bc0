r"""Iterate an operator on a cloud and record cloud metrics at every step (claims B2-B7).

$$x^{(0)} = \text{cloud}, \qquad x^{(k+1)} = F(x^{(k)}), \quad k = 0, \dots, \text{steps}-1$$
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import positive_int
from expattn.dynamics.metrics import METRICS
from expattn.dynamics.operators import check_cloud


@dataclass
class Trajectory:
    """What ``run`` returns.

    Attributes:
        metrics: name -> ``(steps + 1, batch)`` values at $x^{(0)}, \\dots, x^{(\\text{steps})}$.
        step_change: ``(steps, batch)`` relative change
            $\\lVert x^{(k+1)} - x^{(k)}\\rVert_F / \\lVert x^{(k)}\\rVert_F$.
        final: the cloud after the last step, ``(batch, token, dim)``.
        snapshots: step -> cloud, for the steps listed in ``keep``.
    """

    metrics: dict[str, Tensor]
    step_change: Tensor
    final: Tensor
    snapshots: dict[int, Tensor] = field(default_factory=dict)


def run(
    cloud: Float[Tensor, "batch token dim"],
    operator: Callable[[Tensor], Tensor],
    steps: int,
    metrics: Sequence[str] = ("trace_cov", "diameter"),
    keep: Sequence[int] = (),
) -> Trajectory:
    r"""Apply ``operator`` ``steps`` times, recording ``metrics`` (names in ``METRICS``) each step.

    Args:
        cloud: ``(batch, token, dim)`` starting points $x^{(0)}$.
        operator: a map of clouds that keeps the shape (an ``nn.Module`` of ``expattn.dynamics``).
        steps: number of applications, >= 1.
        metrics: names from ``expattn.dynamics.metrics.METRICS``.
        keep: steps (0..steps) whose clouds are returned in ``snapshots``.

    Returns:
        ``Trajectory``. Raises ``ValueError`` if the operator changes the shape or produces a
        non-finite value (the step is named).
    """
    check_cloud(cloud)
    positive_int("steps", steps)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; known: {', '.join(sorted(METRICS))}")
    bad_keep = [k for k in keep if not 0 <= k <= steps]
    if bad_keep:
        raise ValueError(f"keep must hold steps in [0, {steps}], got {bad_keep}")
    values: dict[str, list[Tensor]] = {m: [] for m in metrics}
    changes, snapshots = [], {}
    x = cloud
    with torch.no_grad():
        for k in range(steps + 1):
            for m in metrics:
                values[m].append(METRICS[m](x))
            if k in keep:
                snapshots[k] = x.clone()
            if k == steps:
                break
            nxt = operator(x)
            if nxt.shape != x.shape:
                raise ValueError(f"operator changed the cloud's shape from {tuple(x.shape)} to {tuple(nxt.shape)}")
            if not torch.isfinite(nxt).all():
                raise ValueError(f"operator produced a non-finite value at step {k + 1}")
            scale = x.flatten(1).norm(dim=-1).clamp_min(torch.finfo(x.dtype).tiny)
            changes.append((nxt - x).flatten(1).norm(dim=-1) / scale)
            x = nxt
    return Trajectory(
        metrics={m: torch.stack(v) for m, v in values.items()},
        step_change=torch.stack(changes),
        final=x,
        snapshots=snapshots,
    )
