"""Hypotheses along training: the probe's headlines of a sweep's run at a few steps, from its initialisation on.

Each run of a sweep exports its model at the steps of ``curve_steps(iters)`` (``TrainConfig.snapshots``: step 0 is
the initialisation, before the first update; then 10% and 30% of the steps) into ``OUT/<run>/steps/<step>``, and at
the end into ``OUT/<run>/model``. The same probe as the final model's (``ProbeDynamics``: E1-E3, the same sample
and seed) measures each export; a ``CurvePoint`` keeps the step, each hypothesis's headline number
(``catalogue.headlines``) and verdict. The sweep writes the points into ``sweep.json`` (each run's ``curve``) and
into the E1-E3 records' ``details["curve"]`` (run -> ``[{step, value, verdict}, ...]``), which the report draws
against the step (``expattn.report.figures_training``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from expattn.sweeps.layer_dynamics import LayerDynamics, ProbeDynamics
from expattn.train.loop import SNAPSHOT_DIR

CURVE_FRACTIONS = (0.0, 0.1, 0.3)  # of the steps, before the end, which is the run's final model


def curve_steps(iters: int) -> tuple[int, ...]:
    """The steps probed before the end: ``round(f * iters)`` for ``f`` in ``CURVE_FRACTIONS``, each once, below
    ``iters``: ``curve_steps(400) == (0, 40, 120)``."""
    return tuple(sorted({round(f * iters) for f in CURVE_FRACTIONS} - {iters}))


@dataclass(frozen=True)
class CurvePoint:
    """The probe of one run at one step: each hypothesis's headline number and verdict."""

    step: int
    headlines: Mapping[str, float]
    verdicts: Mapping[str, str]


def point(step: int, dynamics: LayerDynamics) -> CurvePoint:
    """The ``CurvePoint`` of a probe's ``dynamics`` at ``step``."""
    return CurvePoint(step, dict(dynamics.headlines), dict(dynamics.verdicts))


def probe_curve(run_dir: Path, steps: Sequence[int], final: LayerDynamics, iters: int, dynamics: ProbeDynamics,
                corpus: str, context: int, seed: int) -> tuple[CurvePoint, ...]:
    """One point per step of ``steps`` (the exports in ``run_dir/steps/<step>``, each probed by ``dynamics``) and
    the final model's (``final``, at ``iters``), in step order.

    Raises:
        ValueError: as ``dynamics`` (e.g. non-finite states of a diverged export).
    """
    points = [point(s, dynamics(run_dir / SNAPSHOT_DIR / str(s), corpus, context, seed)) for s in steps if s != iters]
    return (*points, point(iters, final))


def curve_details(curves: Mapping[str, Sequence[CurvePoint]], claim: str) -> dict[str, list[dict]]:
    """``details["curve"]`` of ``claim``'s sweep record: run -> ``[{step, value, verdict}, ...]`` (``value`` None
    where the probe gave no headline number)."""
    return {run: [{"step": p.step, "value": p.headlines.get(claim), "verdict": p.verdicts.get(claim, "skipped")}
                  for p in points]
            for run, points in curves.items() if points}
