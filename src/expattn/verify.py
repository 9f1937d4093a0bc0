"""``expattn verify``: run the exact checks and show them as a table."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from expattn.claims import RunContext, run_claim, select
from expattn.report.schema import Record, results_document, write_json_atomic

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


def run_verify(only: list[str] | None, json_path: Path | None, seed: int, console: Console) -> bool:
    """Run the selected checks, print the table, write JSON; True iff every check passed."""
    chosen = select("verify", only)
    start = time.perf_counter()
    records = []
    with console.status("verifying") as status:
        for claim in chosen:
            status.update(f"verifying {claim.id}")
            records.append(run_claim(claim, RunContext(seed=seed)))
    console.print(record_table(records, "expattn verify"))
    passed = sum(r.verdict == "pass" for r in records)
    console.print(f"{passed}/{len(records)} passed in {time.perf_counter() - start:.1f} s (seed {seed})")
    if json_path is not None:
        doc = results_document(records, "verify", seeds={"seed": seed})
        write_json_atomic(json_path, doc)
    return all(r.verdict == "pass" for r in records)
