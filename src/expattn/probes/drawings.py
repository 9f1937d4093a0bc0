"""What a probe's results keep of each estimator once its record is made: the figure's numbers, on the host.

A fitted estimator holds its streaming statistics ($(D, D)$ accumulators per layer, tens of GiB at 7B scale)
on the probe's device, and its context holds the model and the float32 copies of its attention weights. The
record reads none of them again: ``ProbeResults.save`` only draws the figure of the numbers ``measure`` gave
(``Measured``: numpy arrays, numbers, lists). A ``Drawing`` keeps that ``Measured`` and a *husk* of the
estimator: the same class with its plain attributes (numbers and names: ``depths``, ``readings``) and a context
without the model, the weights and the shared analyses; so a notebook that probes in a loop holds, per run, its
records and figures' numbers, not the previous run's statistics.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path

from expattn.probes.hypotheses.base import Estimator, Measured, ProbeContext
from expattn.probes.models.adapters import Adapter

PLAIN = (bool, int, float, str, type(None))


def _unplugged(*_args: object) -> None:
    raise RuntimeError("a probe result's context has no model: its statistics were released with the run")


def host_context(ctx: ProbeContext) -> ProbeContext:
    """``ctx`` without the model, its weights, the adapter's reading of them and the shared analyses: the names and
    sizes the figures read (``layers``, ``dim``, ``model_name``, the adapter's ``family`` and ``norm_position``)."""
    a = ctx.adapter
    bare = Adapter(a.family, a.model_types, a.norm_position, _unplugged, a.points, _unplugged, _unplugged, a.finish)
    return replace(ctx, model=None, adapter=bare, attention=(), excluded=ctx.excluded.cpu(), token_text=None,
                   analyses={})


def husk(est: Estimator, ctx: ProbeContext) -> Estimator:
    """A copy of ``est`` with context ``ctx`` and only its plain attributes (``PLAIN``: numbers, strings, None):
    no tensor, statistics object or list of them."""
    out = copy.copy(est)  # Estimator.__getstate__ leaves the context out
    for name, value in list(vars(out).items()):
        if not isinstance(value, PLAIN):
            delattr(out, name)
    out.ctx = ctx
    return out


@dataclass
class Drawing:
    """An estimator's figure, drawable after the run: its ``husk`` and what it measured (host numbers)."""

    estimator: Estimator
    measured: Measured

    @property
    def claim(self) -> str:
        return self.estimator.claim

    def draw(self, out_dir: Path | None) -> list[str]:
        """The figure's files under ``out_dir`` (as the record's ``plots``; ``[]`` without one)."""
        return self.estimator.draw(self.measured, out_dir)


def drawings(estimators: list[Estimator], measured: dict[str, Measured]) -> dict[str, Drawing]:
    """Claim -> ``Drawing`` of each estimator that measured (not those whose update or analysis failed)."""
    if not estimators:
        return {}
    ctx = host_context(estimators[0].ctx)
    return {est.claim: Drawing(husk(est, ctx), measured[est.claim]) for est in estimators if est.claim in measured}
