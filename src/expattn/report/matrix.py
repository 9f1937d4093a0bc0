"""The per-model summary: a claim x (model or sweep) matrix of verdicts, each cell with its headline number.

Verdicts are never pooled across models: a probe record fills the cell of its model. A
training-sweep record (one record over several trained runs, ``details["probe_verdicts"]`` per
run) fills one cell for the whole sweep: the worst verdict over its runs and ``n/m runs`` (``n`` of
its ``m`` runs gave that worst verdict). That pools runs of one sweep only, and every run keeps its
own verdict and number in the trained-runs table (``Matrix.runs``), which the cell links to.
Records that belong to no model (verify, simulate) stay in the claim summary, where the worst
verdict pools only them.

A probe record measured beside its model's random-init twin (``results.twin``) says what training did to its
verdict (``Record.training``); a cell whose verdict the twin earns too (``architectural``) carries
``ARCHITECTURAL_MARK``, explained by ``MARK_LEGEND`` under the matrix, and every such cell's tooltip names the
twin's verdict.

The headline number of a cell is one metric per hypothesis (``headlines()``, the catalogue entries'
``headline``, read when the matrix is built); a sweep run's number is the median of that run's per-layer values
(``SWEEP_KEYS``), the same quantity the probe summarises over layers.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from expattn.catalogue import ENTRIES, headlines
from expattn.catalogue.entry import HEADLINE_READINGS
from expattn.report.cards import Card, claim_key, format_value, worst
from expattn.results.record import Record

# Per-layer metric keys of one run in a training-sweep record (``{run}`` is the run's name).
SWEEP_KEYS = {
    "E1": r"{run}\.layer\d+",
    "E2": r"norm[12]\.{run}\.layer\d+",
    "E3": r"{run}\.depth\d+",
}

PER_MODEL = "per model"
ARCHITECTURAL_MARK = "\u2020"  # a dagger beside the verdict
MARK_LEGEND = (
    f"{ARCHITECTURAL_MARK} architectural: every random-init twin of the model (same architecture, one per "
    "initialisation seed, the same token ids) earns the same verdict, so it is a property of the architecture, not a "
    "finding about training"
)
# Under the matrix where E4 or E9 has a row: the rivals their verdicts are decided against.
RIVALS_LEGEND = (
    "E4 and E9 read a head as aligned with its target (Sigma^+ or Sigma) only when it stays aligned once the target's "
    "top 1, 5 and 20 directions are projected out and beats the target's powers (Sigma^2, Sigma^(1/2)): a head that "
    "reads only Sigma's leading directions is not supported"
)
RIVALLED = ("E4", "E9")
# Row titles in words where the catalogue's title is a formula; the formula stays on hover.
PLAIN_TITLES = {
    "E4": "query-key form aligned with the inverse covariance",
    "E5": "attention is the gradient of log Z (the probe's self-check)",
    "E9": "query-key form aligned with the covariance (Fisher reading)",
}
STATEMENTS = {e.id: e.statement for e in ENTRIES}
# Anchor of the trained-runs table (one row per run and claim) that each sweep cell links to.
RUNS_ANCHOR = "trained-runs"


@dataclass(frozen=True)
class Cell:
    """One record's verdict for one model or sweep, its number (``""``: none), the anchor it links to, a
    tooltip (``""``: none) and a mark (``ARCHITECTURAL_MARK`` or ``""``)."""

    verdict: str
    value: str
    anchor: str
    note: str = ""
    mark: str = ""


@dataclass(frozen=True)
class Column:
    """A model or a sweep, and what its cells show."""

    name: str
    description: str


@dataclass(frozen=True)
class MatrixRow:
    """One claim: its ID, title in words, the headline's description, one tuple of cells per column, the
    headline's unit and direction (``""``: none) and the claim's formula (catalogue title and statement)."""

    claim_id: str
    title: str
    headline: str
    cells: tuple[tuple[Cell, ...], ...]
    reading: str = ""
    formula: str = ""


@dataclass(frozen=True)
class RunRow:
    """One trained run's own verdict and headline number on one claim, and the card of its sweep's record."""

    sweep: str
    run: str
    claim_id: str
    verdict: str
    value: str
    anchor: str


@dataclass(frozen=True)
class Matrix:
    """Columns (models and sweeps, in order of appearance), one row per claim measured on them, and every
    trained run's verdict per claim (by sweep, claim, run)."""

    columns: tuple[Column, ...]
    rows: tuple[MatrixRow, ...]
    runs: tuple[RunRow, ...] = ()

    @property
    def marked(self) -> bool:
        """True when a cell carries ``ARCHITECTURAL_MARK`` (the legend is then shown)."""
        return any(cell.mark for row in self.rows for cells in row.cells for cell in cells)

    @property
    def rivalled(self) -> bool:
        """True when E4 or E9 has a row (``RIVALS_LEGEND`` is then shown)."""
        return any(row.claim_id in RIVALLED for row in self.rows)


def _sweep_value(card: Card, run: str) -> str:
    pattern = SWEEP_KEYS.get(card.record.id)
    if pattern is None:
        return ""
    regex = re.compile(pattern.format(run=re.escape(run)))
    values = [v for k, v in card.record.metrics.items() if regex.fullmatch(k) and isinstance(v, int | float)]
    return format_value(float(statistics.median(values))) if values else ""


def _runs(card: Card) -> dict[str, str]:
    """A sweep record's verdict per run (empty: not a sweep record)."""
    runs = card.record.details.get("probe_verdicts")
    return {str(k): str(v) for k, v in runs.items()} if isinstance(runs, dict) else {}


def _sweep(card: Card) -> str:
    details = card.record.details
    return str(details.get("name") or details.get("stage") or "sweep")


def sweep_cell(verdicts: Sequence[str]) -> Cell:
    """A sweep's cell: the worst of its runs' verdicts, and ``n/m runs`` (``n`` of ``m`` runs gave it)."""
    low = worst(list(verdicts))
    n, m = sum(v == low for v in verdicts), len(verdicts)
    note = (
        f"worst verdict over this sweep's {m} trained runs; {n} of them gave it. "
        "Each run's own verdict and number: Trained runs"
    )
    return Cell(low, f"{n}/{m} runs", RUNS_ANCHOR, note)


def model_cells(card: Card) -> list[tuple[Column, Cell]]:
    """The (column, cell) pairs of a record: one for a probed model, one for a sweep, none otherwise."""
    record = card.record
    runs = _runs(card)
    if runs:
        name = _sweep(card)
        description = (
            f"{name}: small LMs trained by one sweep; each cell is the worst verdict over the sweep's "
            "runs and how many runs gave it (n/m runs); every run: Trained runs"
        )
        return [(Column(name, description), sweep_cell(list(runs.values())))]
    model = record.details.get("model")
    if model in (None, ""):
        return []
    key = headlines().get(record.id, ("", ""))[0]
    value = record.metrics.get(key)
    shown = format_value(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""
    description = f"model {model}: each cell is this model's own record, its verdict and headline number"
    return [(Column(str(model), description), Cell(record.verdict, shown, card.anchor, *twin_mark(record)))]


def twin_mark(record: Record) -> tuple[str, str]:
    """A probe record's tooltip and mark from its random-init twins: ``("training: architectural (random-init
    twins: supported, supported, supported)", ARCHITECTURAL_MARK)``; ``("", "")`` without a twin."""
    if record.training is None:
        return "", ""
    twins = [c.verdict for c in record.controls if c.kind == "twin"]
    note = f"training: {record.training}" + (f" (random-init twins: {', '.join(twins)})" if twins else "")
    return note, ARCHITECTURAL_MARK if record.training == "architectural" else ""


def run_rows(cards: Sequence[Card]) -> tuple[RunRow, ...]:
    """Every trained run's verdict and headline number per claim, ordered by sweep, claim, then run."""
    rows = [
        RunRow(_sweep(card), run, card.record.id, verdict, _sweep_value(card, run), card.anchor)
        for card in cards
        for run, verdict in _runs(card).items()
    ]
    sweeps = list(dict.fromkeys(r.sweep for r in rows))
    return tuple(sorted(rows, key=lambda r: (sweeps.index(r.sweep), claim_key(r.claim_id))))


def build_matrix(cards: Sequence[Card], titles: dict[str, str]) -> Matrix:
    """The claim x (model or sweep) matrix of ``cards`` (records of no model are left out) and its trained runs.

    Args:
        cards: the report's cards, in record order.
        titles: short claim titles by ID.
    """
    columns: dict[str, Column] = {}
    found: dict[tuple[str, str], list[Cell]] = {}
    for card in cards:
        for column, cell in model_cells(card):
            columns.setdefault(column.name, column)
            found.setdefault((card.record.id, column.name), []).append(cell)
    ids = sorted({claim_id for claim_id, _ in found}, key=claim_key)
    measures = headlines()
    rows = tuple(
        MatrixRow(
            i,
            PLAIN_TITLES.get(i, titles.get(i, "")),
            measures.get(i, ("", ""))[1],
            tuple(tuple(found.get((i, c), ())) for c in columns),
            HEADLINE_READINGS.get(i, ""),
            ": ".join(t for t in (titles.get(i, ""), STATEMENTS.get(i, "")) if t),
        )
        for i in ids
    )
    return Matrix(tuple(columns.values()), rows, run_rows(cards))


def check_verdict(cards: Sequence[Card]) -> str:
    """A claim's summary verdict: the worst over its records of no model, ``per model`` if it has only
    per-model records, ``not run`` without records."""
    checks = [c.record.verdict for c in cards if not model_cells(c)]
    if checks or not cards:
        return worst(checks)
    return PER_MODEL
