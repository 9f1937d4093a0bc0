"""The per-model summary: a claim x (model or run) matrix of verdicts, each cell with its headline number.

Verdicts are never pooled across models: a probe record fills the cell of its model, and a
training-sweep record (one record over several trained runs, ``details["probe_verdicts"]`` per
run) fills one cell per run with that run's own verdict. Records that belong to no model (verify,
simulate) stay in the claim summary, where the worst verdict pools only them.

The headline number of a cell is one metric per hypothesis (``HEADLINES``); a sweep run's number
is the median of that run's per-layer values (``SWEEP_KEYS``), the same quantity the probe
summarises over layers.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from expattn.report.document import Card, claim_key, format_value, worst

# One headline metric per hypothesis: (metric key of a probe record, what it is).
HEADLINES = {
    "E1": ("median_raw_ratio_excl", "median spread ratio (x + attn) / x over layers"),
    "E2": ("median_raw_ratio_excl", "median spread ratio after / before norm (the verdict's raw reading)"),
    "E3": ("median_abs_kurtosis_excl", "median |excess kurtosis| along random directions over depths (the verdict "
           "also reads the radius ratio)"),
    "E4": ("median_cos_sigma_inv", "median cosine of W_q^T W_k with Sigma^+ over heads, on the range of Sigma"),
    "E5": ("max_error", "max error of attention vs grad log Z"),
    "E6": ("median_heldout_r2", "median held-out R^2 of a linear FC fit"),
    "E7": ("log10_drop_no_skip", "log10 drop of the rank-one residual, pure attention"),
    "E8": ("median_pairwise_cos", "median pairwise cosine of head outputs"),
    "E9": ("median_cos_sigma", "median cosine of W_q^T W_k with Sigma over heads, on the range of Sigma"),
}

# Per-layer metric keys of one run in a training-sweep record (``{run}`` is the run's name).
SWEEP_KEYS = {
    "E1": r"{run}\.layer\d+",
    "E2": r"norm[12]\.{run}\.layer\d+",
    "E3": r"{run}\.depth\d+",
}

PER_MODEL = "per model"


@dataclass(frozen=True)
class Cell:
    """One record's verdict for one model or run, its headline number (``""``: none) and its card."""

    verdict: str
    value: str
    anchor: str


@dataclass(frozen=True)
class MatrixRow:
    """One claim: its ID, title, the headline's description and one tuple of cells per column."""

    claim_id: str
    title: str
    headline: str
    cells: tuple[tuple[Cell, ...], ...]


@dataclass(frozen=True)
class Matrix:
    """Columns (models and sweep runs, in order of appearance) and one row per claim measured on them."""

    columns: tuple[str, ...]
    rows: tuple[MatrixRow, ...]


def _sweep_value(card: Card, run: str) -> str:
    pattern = SWEEP_KEYS.get(card.record.id)
    if pattern is None:
        return ""
    regex = re.compile(pattern.format(run=re.escape(run)))
    values = [v for k, v in card.record.metrics.items() if regex.fullmatch(k) and isinstance(v, int | float)]
    return format_value(float(statistics.median(values))) if values else ""


def model_cells(card: Card) -> list[tuple[str, Cell]]:
    """The (column, cell) pairs of a record: one for a probed model, one per run of a sweep, none otherwise."""
    record, details = card.record, card.record.details
    runs = details.get("probe_verdicts")
    if isinstance(runs, dict) and runs:
        source = str(details.get("name") or details.get("stage") or "sweep")
        return [
            (f"{source}: {run}", Cell(str(v), _sweep_value(card, str(run)), card.anchor)) for run, v in runs.items()
        ]
    model = details.get("model")
    if model in (None, ""):
        return []
    key = HEADLINES.get(record.id, ("", ""))[0]
    value = record.metrics.get(key)
    shown = format_value(value) if isinstance(value, int | float) and not isinstance(value, bool) else ""
    return [(str(model), Cell(record.verdict, shown, card.anchor))]


def build_matrix(cards: Sequence[Card], titles: dict[str, str]) -> Matrix:
    """The claim x (model or run) matrix of ``cards`` (records of no model are left out).

    Args:
        cards: the report's cards, in record order.
        titles: short claim titles by ID.
    """
    columns: dict[str, None] = {}
    found: dict[tuple[str, str], list[Cell]] = {}
    for card in cards:
        for column, cell in model_cells(card):
            columns.setdefault(column)
            found.setdefault((card.record.id, column), []).append(cell)
    ids = sorted({claim_id for claim_id, _ in found}, key=claim_key)
    rows = tuple(
        MatrixRow(i, titles.get(i, ""), HEADLINES.get(i, ("", ""))[1],
                  tuple(tuple(found.get((i, c), ())) for c in columns))
        for i in ids
    )
    return Matrix(tuple(columns), rows)


def check_verdict(cards: Sequence[Card]) -> str:
    """A claim's summary verdict: the worst over its records of no model, ``per model`` if it has only
    per-model records, ``not run`` without records."""
    checks = [c.record.verdict for c in cards if not model_cells(c)]
    if checks or not cards:
        return worst(checks)
    return PER_MODEL
