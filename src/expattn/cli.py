"""Command-line interface: parse options, call the library, print and write results.

Every user error ends in a one-line ``error: ...`` message and exit code 2, without a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Attention as the gradient of an exponential family's log-normalizer.",
)
console = Console(width=None if sys.stdout.isatty() else 160)


@app.callback()
def _root() -> None:
    """Attention as the gradient of an exponential family's log-normalizer."""


def fail(message: str) -> NoReturn:
    """Print a one-line error and exit with code 2."""
    Console(stderr=True).print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def parse_ids(only: str | None) -> list[str] | None:
    if only is None:
        return None
    ids = [part.strip().upper() for part in only.split(",") if part.strip()]
    if not ids:
        fail("--only must list claim IDs such as A3,A9")
    return ids


@app.command()
def verify(
    only: Annotated[str | None, typer.Option(help="Comma-separated claim IDs, e.g. A3,A9.")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results file here.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random draws.")] = 0,
) -> None:
    """Check every exact claim (identities and inequalities) numerically; exit 0 iff all pass."""
    from expattn.verify import run_verify

    try:
        ok = run_verify(parse_ids(only), json_path, seed, console)
    except (ValueError, OSError) as err:
        fail(str(err))
    raise typer.Exit(code=0 if ok else 1)


@app.command()
def report(
    out: Annotated[Path, typer.Option(help="Folder for results.json, report.html, report.md and plots.")] = Path(
        "report"
    ),
    models: Annotated[str, typer.Option(help="Comma-separated models to probe: minilm, smollm2 or model folders.")] = (
        "minilm,smollm2"
    ),
    quick: Annotated[bool, typer.Option("--quick", help="Small sizes everywhere (< 3 min).")] = False,
    seed: Annotated[int, typer.Option(help="Seed of every stage.")] = 0,
) -> None:
    """Run verify, simulate and probe and write one shareable report; exit 0 iff nothing failed."""
    from expattn.report.run import ReportConfig, run_report, summary_table

    names = tuple(m.strip() for m in models.split(",") if m.strip())
    try:
        result = run_report(ReportConfig(out_dir=out, models=names, quick=quick, seed=seed), console)
    except (ValueError, TypeError, OSError) as err:
        fail(str(err))
    console.print(summary_table(result))
    console.print(f"wrote {out / 'report.html'}, {out / 'report.md'} and {out / 'results.json'}", highlight=False)
    if result.problems:
        fail("; ".join(result.problems))
    raise typer.Exit(code=0 if result.ok else 1)


def main() -> None:  # pragma: no cover - the console script calls app() directly
    app(prog_name="expattn")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
