"""``expattn verify``: run the exact checks and show them as a table."""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console

from expattn.catalogue.registry import RunContext
from expattn.commands.checks import select, timed_claim
from expattn.commands.tables import record_table
from expattn.results.outputs import output_file
from expattn.results.record import results_document
from expattn.results.timings import write_results


def run_verify(
    only: list[str] | None, json_path: Path | None, seed: int, console: Console, overwrite: bool = False
) -> bool:
    """Run the selected checks, print the table, write JSON; True iff every check passed.

    ``json_path`` follows the one rule of output files (``expattn.results.outputs``): it is checked
    and locked before any check runs.
    """
    chosen = select("verify", only)
    with nullcontext() if json_path is None else output_file(json_path, overwrite=overwrite):
        start = time.perf_counter()
        records, timings = [], {}
        with console.status("verifying") as status:
            for claim in chosen:
                status.update(f"verifying {claim.id}")
                record, seconds = timed_claim(claim, RunContext(seed=seed))
                records.append(record)
                timings[claim.name] = {"seconds": seconds}
        console.print(record_table(records, "expattn verify"))
        passed = sum(r.verdict == "pass" for r in records)
        console.print(f"{passed}/{len(records)} passed in {time.perf_counter() - start:.1f} s (seed {seed})")
        if json_path is not None:
            write_results(json_path, results_document(records, "verify", seeds={"seed": seed}, timings=timings))
    return all(r.verdict == "pass" for r in records)
