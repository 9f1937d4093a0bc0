"""The content of a report, independent of its format: what ``report.html`` and ``report.md`` show.

A report is a view of one results document (the JSON object of ``results.json``, see
``results/record.py``): a summary row per claim ID of the catalogue (``expattn.catalogue``), the
statements the seeds print wrongly, one card per record grouped by claim group (A..E), and the
environment (versions, seeds, git revision, run time per stage). Both renderers read this view
only, so the two formats always agree.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from expattn import catalogue
from expattn.report.cards import GROUPS, Card, claim_key, format_value
from expattn.report.matrix import Matrix, build_matrix
from expattn.results.frame import record_label
from expattn.results.record import Record

# Every claim of the catalogue gets a summary row: a claim with no record is shown as "not run".
CLAIM_TITLES = {e.id: e.title for e in catalogue.ENTRIES}
# What the seeds print where they are wrong; the correction shown beside it is the record's own
# statement. A record may override the text with ``details["as_printed_statement"]``; without
# either, its notes are shown.
AS_PRINTED = {e.id: e.as_printed for e in catalogue.ENTRIES if e.as_printed is not None}



@dataclass(frozen=True)
class SummaryRow:
    """One claim ID: its title and the cards that check it (empty: not run)."""

    claim_id: str
    title: str
    cards: tuple[Card, ...]


@dataclass(frozen=True)
class Stage:
    """Run time and outcome of one stage (``ok``, ``fail`` or ``skipped`` with a reason).

    ``seconds`` is wall time; ``cpu_seconds`` is the process's CPU time over all threads (on a
    shared machine the wall time grows with the load, the CPU time much less). Both are None for a
    ``results.json`` read without its ``timings.json`` (the wall clock is kept apart: ``results.timings``).
    """

    name: str
    status: str
    seconds: float | None = None
    records: int = 0
    reason: str = ""
    cpu_seconds: float | None = None


@dataclass(frozen=True)
class ReportView:
    """Everything a renderer shows, in display order."""

    title: str
    summary: tuple[SummaryRow, ...]
    as_printed: tuple[tuple[Card, str], ...]
    groups: tuple[tuple[str, str, tuple[Card, ...]], ...]
    stages: tuple[Stage, ...]
    environment: tuple[tuple[str, str], ...]
    counts: dict[str, int] = field(default_factory=dict)
    matrix: Matrix | None = None
    records: tuple[Record, ...] = ()


def source_label(card: Card) -> str:
    """The card's label where it adds to the claim ID (``simulate b5-theorem1``), else empty."""
    return "" if card.label == card.record.id else card.label


def details_text(record: Record, limit: int = 6000) -> str:
    """The record's details as indented JSON, cut at ``limit`` characters."""
    shown = {k: v for k, v in record.details.items() if k not in ("stage", "preset", "name", "model")}
    if not shown:
        return ""
    text = json.dumps(shown, indent=1, default=str)
    return text if len(text) <= limit else text[:limit] + f"\n... ({len(text) - limit} more characters)"


def card_fields(record: Record) -> list[tuple[str, str]]:
    """The labelled text fields of a record's card, in display order, the empty ones left out."""
    fields = [("statement", record.statement), ("source", record.source), ("method", record.method),
              ("kind", record.kind), ("criterion", record.criterion)]
    if record.as_printed is not None:
        fields.append(("as printed", record.as_printed))
    return [(name, value) for name, value in fields if value]


def control_rows(record: Record) -> list[tuple[str, str, str, str, str]]:
    """Per control: name, kind, the verdict it gave, the verdicts its kind demands, and its metrics as text."""
    rows = []
    for c in record.controls:
        expected = {"negative": "fail / not_supported", "positive": "pass / supported"}.get(c.kind, "any (training)")
        numbers = ", ".join(f"{k} = {format_value(v)}" for k, v in c.metrics.items())
        rows.append((c.name, c.kind, c.verdict, expected, numbers))
    return rows


PUBLISHED_FIELDS = ("source", "measure", "published", "ours", "note")


def published_rows(view: ReportView) -> list[tuple[Card, dict[str, str]]]:
    """Every record's ``details["published"]`` entries (``{source, measure, published, ours, note}``: a
    published finding beside our number on the same kind of measurement) as text, with their card."""
    rows = []
    for _, _, cards in view.groups:
        for card in cards:
            entries = card.record.details.get("published") or []
            for entry in entries if isinstance(entries, list) else []:
                if isinstance(entry, dict):
                    rows.append((card, {k: format_value(entry.get(k, "")) for k in PUBLISHED_FIELDS}))
    return rows


def as_printed_evidence(record: Record) -> list[tuple[str, str]]:
    """The metrics that measure the statement as printed (``as_printed*``) and the tolerance."""
    keys = [k for k in record.metrics if k.startswith("as_printed")] + ["tolerance"]
    return [(k, format_value(record.metrics[k])) for k in keys if k in record.metrics]


def cpu(stage: Stage) -> str:
    """A stage's CPU seconds as text (``-`` when not measured)."""
    return "-" if stage.cpu_seconds is None else f"{stage.cpu_seconds:.1f}"


def wall(stage: Stage) -> str:
    """A stage's wall seconds as text (``-`` when not measured)."""
    return "-" if stage.seconds is None else f"{stage.seconds:.1f}"


def _records(document: dict[str, Any]) -> list[Record]:
    names = {f.name for f in dataclasses.fields(Record)}
    return [Record(**{k: v for k, v in r.items() if k in names}) for r in document.get("records", [])]


def _environment(document: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    rows = [("command", str(document.get("command", "")))]
    for key in ("started", "total_seconds", "git_revision", "quick", "models", "platform"):
        if key in document:
            rows.append((key, format_value(document[key])))
    for key, value in (document.get("seeds") or {}).items():
        rows.append((f"seed: {key}", format_value(value)))
    for key, value in (document.get("versions") or {}).items():
        rows.append((f"version: {key}", str(value)))
    return tuple(rows)


def build_view(document: dict[str, Any], title: str = "expattn report") -> ReportView:
    """Arrange a results document for display.

    Args:
        document: a results document (``results_document(...)`` or ``results.json`` read back),
            optionally with ``stages`` (list of ``Stage`` fields) and environment keys
            (``started``, ``total_seconds``, ``git_revision``, ``quick``, ``models``).
        title: heading of the report.

    Returns:
        The ``ReportView``: summary rows for every catalogue ID plus any other ID seen, the
        claim x model matrix (``report.matrix``), the as-printed failures, cards grouped A..E,
        stage timings and the environment.
    """
    if not isinstance(document, dict):
        raise TypeError(f"document must be a results dict, got {type(document).__name__}")
    records = _records(document)
    cards = [Card(f"rec-{i}", record_label(r), r) for i, r in enumerate(records)]
    by_id: dict[str, list[Card]] = {}
    for card in cards:
        by_id.setdefault(card.record.id, []).append(card)
    ids = sorted(set(CLAIM_TITLES) | set(by_id), key=claim_key)
    summary = tuple(SummaryRow(i, CLAIM_TITLES.get(i, ""), tuple(by_id.get(i, ()))) for i in ids)
    ordered = sorted(cards, key=lambda c: claim_key(c.record.id))
    as_printed = tuple(
        (c, str(c.record.details.get("as_printed_statement") or AS_PRINTED.get(c.record.id) or c.record.notes))
        for c in ordered
        if c.record.as_printed == "fail"
    )
    groups = []
    for key in sorted({claim_key(c.record.id)[0] for c in cards}):
        members = tuple(c for c in ordered if claim_key(c.record.id)[0] == key)
        groups.append((key.lstrip("~"), GROUPS.get(key, "Other records"), members))
    stages = tuple(
        Stage(**{k: v for k, v in s.items() if k in {f.name for f in dataclasses.fields(Stage)}})
        for s in document.get("stages", [])
    )
    counts: dict[str, int] = {}
    for r in records:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    matrix = build_matrix(cards, CLAIM_TITLES)
    return ReportView(title, summary, as_printed, tuple(groups), stages, _environment(document), counts, matrix,
                      tuple(records))
