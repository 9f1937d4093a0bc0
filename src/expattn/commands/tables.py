"""Terminal tables of records: one colour per verdict, every user string escaped for rich markup."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from expattn.results.record import Record

STYLE = {"pass": "green", "fail": "red", "supported": "green", "not_supported": "red", "error": "bold red"}


def record_table(records: list[Record], title: str) -> Table:
    """Columns: ID, statement, method, max error or statistic, tolerance, verdict, as printed."""
    table = Table(title=title, show_lines=False)
    for name in ("ID", "statement", "method", "max error / stat", "tolerance", "verdict", "as printed"):
        table.add_column(name, overflow="fold")
    for r in records:
        stat = r.metrics.get("max_error", r.metrics.get("statistic"))
        tol = r.metrics.get("tolerance")
        style = STYLE.get(r.verdict, "yellow")
        printed = r.as_printed or "-"
        table.add_row(
            escape(r.id),
            escape(r.statement),
            escape(r.method),
            "-" if stat is None else f"{stat:.2e}",
            "-" if tol is None else f"{tol:.0e}",
            f"[{style}]{r.verdict}[/]",
            f"[{STYLE.get(printed, 'dim')}]{printed}[/]",
        )
    return table


def headline_table(records: list[Record], title: str) -> Table:
    """Columns: ID, claim, headline measure (the catalogue's ``headlines``), its value, verdict and, for a
    skipped or error record, why.

    The value is the record's own headline metric (``-`` where the record has none, e.g. skipped).
    """
    from expattn.catalogue import ENTRIES, headlines
    from expattn.report.cards import format_value

    titles = {e.id: e.title for e in ENTRIES}
    table = Table(title=title, show_lines=False)
    skipped = any(r.verdict in ("skipped", "error") for r in records)
    for name in ("ID", "claim", "headline measure", "value", "verdict", *(("why",) if skipped else ())):
        table.add_column(name, overflow="fold", justify="right" if name == "value" else "left")
    for r in records:
        key, measure = headlines().get(r.id, ("", ""))
        value = r.metrics.get(key)
        shown = format_value(value) if isinstance(value, int | float) and not isinstance(value, bool) else "-"
        notes = "" if r.verdict not in ("skipped", "error") else r.notes if len(r.notes) <= 80 else r.notes[:77] + "..."
        why = (escape(notes),) if skipped else ()
        table.add_row(escape(r.id), escape(titles.get(r.id, r.statement)), escape(measure), shown,
                      f"[{STYLE.get(r.verdict, 'yellow')}]{escape(r.verdict)}[/]", *why)
    return table


def spread_table(outcomes: dict, title: str) -> Table:
    """Columns: ID, headline measure, its median and [min, max] over the seeds, each seed's verdict, and whether
    they agree; ``outcomes`` maps a seed to its probe's outcome (``.records``)."""
    from expattn.catalogue import headlines
    from expattn.report.cards import format_value
    from expattn.results.seed_spread import seed_spread

    table = Table(title=title, show_lines=False)
    for name in ("ID", "headline measure", "median", "[min, max]", "verdicts", "agree"):
        table.add_column(escape(name), overflow="fold", justify="right" if name in ("median", "[min, max]") else "left")
    for s in seed_spread({seed: o.records for seed, o in outcomes.items()}, headlines()):
        shown = "-" if s.median is None else format_value(s.median)
        span = "-" if s.low is None else escape(f"[{format_value(s.low)}, {format_value(s.high)}]")
        verdicts = ", ".join(f"[{STYLE.get(v, 'yellow')}]{escape(v)}[/]" for v in s.verdicts)
        table.add_row(escape(s.id), escape(s.description), shown, span, verdicts, "yes" if s.verdicts_agree else "no")
    return table
