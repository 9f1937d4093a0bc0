r"""The shape every ``expattn simulate`` preset shares: declared sizes, then measure, judge, draw.

A preset is a ``Preset`` subclass; the check registered with ``register_claim`` calls an instance::

    class Collapse(Preset):
        sizes = Sizes(quick=dict(batch=3, steps=40), full=dict(batch=8, steps=200))

        def measure(self, ctx, n): ...      # every random draw, from generator(ctx.seed)
        def judge(self, measured): ...      # the Record: verdict, controls, metrics, notes
        def draw(self, measured, out_dir): ...  # the figure's file names

    def b2_collapse(ctx: RunContext) -> Record:  # decorated by register_claim and single_thread
        return Collapse()(ctx)

``Preset.__call__`` is the only place that reads ``ctx.quick``: it picks ``sizes.quick`` or ``sizes.full``
and hands them to ``measure`` as attributes (``n.batch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

from expattn.catalogue.registry import RunContext
from expattn.results.record import Record

Measured = dict[str, Any]  # what measure found: arrays, tables, per-setting rows; read by judge and draw


@dataclass(frozen=True)
class Sizes:
    """A preset's sizes in the two modes: ``quick`` (smoke runs, ``report --quick``, tests) and ``full``.

    Both mappings name the same sizes (``batch``, ``steps``, ...); a size that does not depend on the mode
    stays a constant of the preset's ``measure``.
    """

    quick: Mapping[str, Any] = field(default_factory=dict)
    full: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if set(self.quick) != set(self.full):
            raise ValueError(f"quick and full must name the same sizes: {sorted(self.quick)}, {sorted(self.full)}")

    def pick(self, quick: bool) -> SimpleNamespace:
        """The sizes of one mode, as attributes (``n.batch``)."""
        return SimpleNamespace(**(self.quick if quick else self.full))


class Preset:
    """A simulate check of one claim, split into ``measure`` (numbers), ``judge`` (``Record``) and ``draw`` (figure).

    Subclasses set ``sizes`` and implement ``measure`` and ``judge``; ``draw`` is optional (no figure).
    Calling an instance with a ``RunContext`` runs the three and returns the ``Record``.
    """

    sizes: ClassVar[Sizes] = Sizes()

    def measure(self, ctx: RunContext, n: SimpleNamespace) -> Measured:
        """Every random draw and computation of the check, at sizes ``n``; returns the numbers judge and draw read."""
        raise NotImplementedError

    def judge(self, measured: Measured) -> Record:
        """The ``Record`` (verdict, criterion, controls, metrics, details, notes) from what ``measure`` returned."""
        raise NotImplementedError

    def draw(self, measured: Measured, out_dir: Path) -> list[str]:
        """Write the figure(s) into ``out_dir``; returns their file names for ``Record.plots`` (none here)."""
        return []

    def __call__(self, ctx: RunContext) -> Record:
        """measure at the sizes of ``ctx``'s mode, judge, and draw when ``ctx.out_dir`` is set."""
        measured = self.measure(ctx, self.sizes.pick(ctx.quick))
        record = self.judge(measured)
        if ctx.out_dir is not None:
            plots = self.draw(measured, ctx.out_dir)
            if plots:
                record.plots = plots
        return record
