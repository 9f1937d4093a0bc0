"""Terminal tables of records: one colour per verdict, every user string escaped for rich markup."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from expattn.results.record import Record

STYLE = {"pass": "green", "fail": "red", "supported": "green", "not_supported": "red"}


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
