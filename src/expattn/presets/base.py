r"""The shape every ``expattn simulate`` preset shares: what it checks, declared sizes, then measure, judge, draw.

A preset is a ``Preset`` subclass that states its claim as class attributes and registers itself::

    @register_preset
    class Collapse(Preset):
        claim, name = "B2", "b2-collapse"   # the catalogue ID and the preset's own name
        method = "Gaussian clouds ..."     # criterion, statement, source: optional
        single_thread = True               # one intra-op torch thread while it runs
        sizes = Sizes(quick=dict(batch=3, steps=40), full=dict(batch=8, steps=200))

        def measure(self, ctx, n): ...      # every random draw, from generator(ctx.seed)
        def judge(self, measured): ...      # the Record: verdict, controls, metrics, notes
        def draw(self, measured, out_dir): ...  # the figure's file names

``register_preset`` hands an instance to ``register_claim`` as the ``simulate`` check ``name`` of ``claim``.
``Preset.__call__`` is the only place that reads ``ctx.quick``: it picks ``sizes.quick`` or ``sizes.full``
and hands them to ``measure`` as attributes (``n.batch``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

import torch

from expattn.catalogue.registry import RunContext, register_claim
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


@contextmanager
def one_thread() -> Iterator[None]:
    """One intra-op torch thread inside the block; the previous count is restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class Preset:
    """A simulate check of one claim, split into ``measure`` (numbers), ``judge`` (``Record``) and ``draw`` (figure).

    Subclasses set ``sizes`` and implement ``measure`` and ``judge``; ``draw`` is optional (no figure).
    Calling an instance with a ``RunContext`` runs the three and returns the ``Record``.

    What ``register_preset`` registers, as class attributes: ``claim`` (catalogue ID), ``name`` (the preset's
    name under ``expattn simulate``), ``method``, ``criterion`` (its decision rule, used where the record states
    none), ``statement`` and ``source`` (``None``: the catalogue entry's, else a narrower part of the claim), and
    ``single_thread``: run with one intra-op torch thread (restored afterwards). Presets that iterate many small
    tensor operations set it; on a shared machine extra threads only spin against other processes (all B
    presets: 525 s with two threads, 68 s with one).
    """

    sizes: ClassVar[Sizes] = Sizes()
    claim: ClassVar[str]
    name: ClassVar[str]
    method: ClassVar[str]
    criterion: ClassVar[str] = ""
    statement: ClassVar[str | None] = None
    source: ClassVar[str | None] = None
    single_thread: ClassVar[bool] = False

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
        """measure at the sizes of ``ctx``'s mode, judge, and draw when ``ctx.out_dir`` is set (with one torch
        thread if ``single_thread``)."""
        with one_thread() if self.single_thread else nullcontext():
            measured = self.measure(ctx, self.sizes.pick(ctx.quick))
            record = self.judge(measured)
            if ctx.out_dir is not None:
                plots = self.draw(measured, ctx.out_dir)
                if plots:
                    record.plots = plots
        return record


P = TypeVar("P", bound=type[Preset])


def register_preset(cls: P) -> P:
    """Class decorator: register an instance of ``cls`` with ``register_claim`` as the ``simulate`` check
    ``cls.name`` of claim ``cls.claim``, with the class's ``method``, ``criterion``, ``statement`` and ``source``."""
    register_claim(cls.claim, method=cls.method, statement=cls.statement, source=cls.source, command="simulate",
                   name=cls.name, criterion=cls.criterion)(cls())
    return cls
