"""``expattn report``: verify -> simulate (all presets) -> probe (each model) -> a short training comparison.

``--stages`` picks a subset (always reported in that order). The stages (``report_stages``) run one after
another in this process, or side by side in ``jobs`` worker processes (``expattn.commands.workers``),
longest first; both give the same records in the same order. One rich progress display shows them.
A stage that raises is ``fail`` with its reason, and the other stages still run. Everything is
written into a staging folder beside ``--out`` and moved into place at the end, so an interrupted
run leaves no partial files.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from expattn.catalogue.registry import Claim
from expattn.commands.checks import claims as registered_claims
from expattn.commands.report_config import ReportConfig
from expattn.commands.report_stages import (
    ProbeModel,
    ProbeTwin,
    UnitResult,
    Work,
    attach_twins,
    lost,
    probe_model,
    probe_model_twin,
    rerun,
    run_unit,
    steps,
    train_norms,
    units,
)
from expattn.commands.workers import auto_jobs, side_by_side, usable
from expattn.probes.models.loading import BUILTIN_MODELS
from expattn.report.document import Stage, cpu, wall
from expattn.report.html import render_html
from expattn.report.markdown import render_markdown
from expattn.results.frame import records_frame
from expattn.results.outputs import check_output_folder, output_folder
from expattn.results.record import Record, results_document
from expattn.results.timings import write_results


@dataclass
class ReportResult:
    """What a run produced: records, stage timings and where it wrote."""

    records: list[Record]
    stages: list[Stage]
    out_dir: Path

    @property
    def ok(self) -> bool:
        """True iff no record failed, no stage failed and no model was unknown."""
        return all(r.ok for r in self.records) and all(s.status != "fail" for s in self.stages)

    @property
    def failures(self) -> str:
        """Why the run is not ``ok``, in one line: the failed stages with their reasons, then the count of records
        that did not pass."""
        stages = [f"stage {s.name} failed ({s.reason or 'no reason given'})" for s in self.stages if s.status == "fail"]
        records = sum(not r.ok for r in self.records)
        return "; ".join([*stages, *([f"{records} record(s) did not pass"] if records else [])]) or "nothing failed"


def unknown_models(models: tuple[str, ...]) -> list[str]:
    """The entries of ``models`` that are neither a known name nor an existing folder."""
    return [m for m in models if m not in BUILTIN_MODELS and not Path(m).expanduser().is_dir()]


def git_revision() -> str:
    """``git describe``-style revision of the installed package's checkout, or ``unknown``."""
    here = Path(__file__).resolve().parent
    try:
        rev = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if rev.returncode != 0:
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


class _Display:
    """The report's progress line: every step done out of all, and what each running stage is doing now."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.task = progress.add_task("report", total=total)
        self.doing: dict[int, str] = {}
        self.finished: set[int] = set()
        self.deaths: dict[int, str] = {}  # stage -> how its worker died before it ran again alone

    def describe(self, item: int, text: str) -> None:
        if item not in self.finished:  # a worker's last words may arrive after its result
            self.doing[item] = text
            self._show()

    def advance(self) -> None:
        self.progress.advance(self.task)

    def finish(self, item: int) -> None:
        self.finished.add(item)
        self.doing.pop(item, None)
        self._show()

    def died(self, item: int, how: str) -> None:
        self.deaths[item] = how

    def _show(self) -> None:
        self.progress.update(self.task, description="\n".join(self.doing.values()) or "report")


@dataclass(frozen=True)
class _Told:
    """``Tell`` for a stage run in this process: straight to the display."""

    display: _Display
    item: int

    def describe(self, text: str) -> None:
        self.display.describe(self.item, text)

    def advance(self) -> None:
        self.display.advance()


@dataclass(frozen=True)
class _Reordered:
    """The display, told by item positions in the workers' order (``order[k]`` is the stage of item ``k``)."""

    display: _Display
    order: list[int]

    def describe(self, item: int, text: str) -> None:
        self.display.describe(self.order[item], text)

    def advance(self) -> None:
        self.display.advance()

    def finish(self, item: int) -> None:
        self.display.finish(self.order[item])

    def died(self, item: int, how: str) -> None:
        self.display.died(self.order[item], how)


# Side by side, the stages start longest first (a probe of a model, then simulate, train, verify).
_LONGEST_FIRST = ("probe", "simulate", "train", "verify")


def _jobs(config: ReportConfig) -> int:
    """The worker processes ``config`` asks for, at most one per stage; 1 (this process) where none can start."""
    stages = len(units(config))
    jobs = min(auto_jobs(stages) if config.jobs is None else config.jobs, stages)
    return jobs if jobs == 1 or usable() else 1


def run_stages(config: ReportConfig, staging: Path, display: _Display, work: Work, jobs: int) -> list[UnitResult]:
    """Every stage of ``config``, in report order; side by side in ``jobs`` workers (``_jobs``) when more than one."""
    todo = units(config)
    if jobs == 1:
        results = []
        for i, unit in enumerate(todo):
            results.append(run_unit(config, staging, work, unit, _Told(display, i)))
            display.finish(i)
        return results
    order = sorted(range(len(todo)), key=lambda i: _LONGEST_FIRST.index(todo[i].kind))
    got = side_by_side(functools.partial(run_unit, config, staging, work), [todo[i] for i in order], jobs,
                       _Reordered(display, order))
    results: list[UnitResult] = [None] * len(todo)  # type: ignore[list-item]
    for k, i in enumerate(order):
        results[i] = got[k] if isinstance(got[k], UnitResult) else lost(todo[i], got[k])
    for i, how in sorted(display.deaths.items()):
        results[i] = rerun(results[i], how)
        print(f"report: the worker of stage {todo[i].name} died ({how}); it re-ran alone: {results[i].stage.status}",
              file=sys.__stderr__ or sys.stderr, flush=True)  # past the progress display, which holds sys.stderr
    return results


def summary_table(result: ReportResult) -> Table:
    """Terminal summary: one row per stage with status, wall and CPU seconds, records and reason."""
    table = Table(title=f"expattn report -> {escape(str(result.out_dir))}")
    for name in ("stage", "status", "seconds", "CPU seconds", "records", "reason"):
        table.add_column(name, overflow="fold")
    colour = {"ok": "green", "fail": "red", "skipped": "yellow"}
    for s in result.stages:
        table.add_row(
            escape(s.name), f"[{colour.get(s.status, 'white')}]{s.status}[/]", wall(s), cpu(s),
            str(s.records), escape(s.reason),
        )
    return table


def _check_sendable(work: Work) -> None:
    """Raise ``TypeError`` naming the first of ``work``'s functions that cannot reach a worker process (a lambda,
    a local function)."""
    for name in ("probe", "claims", "train", "twin"):
        try:
            pickle.dumps(getattr(work, name))
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            raise TypeError(f"{name} must be a module-level function when jobs > 1 (it runs in a worker process): "
                            f"{err}") from err


def run_report(config: ReportConfig, console: Console, probe: ProbeModel = probe_model, *,
               claims: Callable[[str], list[Claim]] = registered_claims,
               train: Callable[[ReportConfig, Path], list[Record]] = train_norms,
               twin: ProbeTwin = probe_model_twin) -> ReportResult:
    """Run the chosen stages (verify, simulate, probe and its twins, train), then write results.json, results.csv,
    report.html, report.md and plots/.

    Args:
        config: the run's options (``ReportConfig``).
        console: where the progress display and the closing summary go.
        probe: one model's probe stage, ``(model, ctx, progress) -> records`` (``probe_model``, at its preset size).
        claims: the checks of ``verify`` and ``simulate``, ``command -> [Claim]`` (the registered ones).
        train: the train stage's comparison, ``(config, plot_dir) -> records`` (``train_norms``).
        twin: one random-init twin's stage, ``(model, ctx, progress, seed) -> records`` (``probe_model_twin``).
        Where ``jobs > 1`` these four run in worker processes: module-level functions.

    Returns:
        The ``ReportResult`` (records, per-stage timings, output folder). Raises ``ValueError``/``OSError`` before
        any work if a model to probe is neither a known name nor a folder, if ``--out`` cannot be written, or the
        one rule of output folders refuses it (``expattn.results.outputs``).
    """
    unknown = unknown_models(config.models) if "probe" in config.chosen else []
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}: expected one of {', '.join(BUILTIN_MODELS)} or a model folder")
    jobs = _jobs(config)
    work = Work(probe, claims, train, twin)
    if jobs > 1:
        _check_sendable(work)
    check_output_folder(config.out_dir, config.overwrite)
    with output_folder(config.out_dir, overwrite=config.overwrite) as staging:
        started, start = datetime.now(timezone.utc), time.perf_counter()
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        (staging / "plots").mkdir(exist_ok=True)
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            total = steps(config, work)
            display = _Display(progress, total)
            results = run_stages(config, staging, display, work, jobs)
            attach_twins(units(config), results)
            progress.update(display.task, description="writing report", completed=total)  # a failed stage's too
        records = [r for result in results for r in result.records]
        stages = [result.stage for result in results]
        timings = {result.stage.name: result.timings for result in results if result.timings is not None}
        document = results_document(
            records,
            config.command,
            seeds={"seed": config.seed},
            stages=[dataclasses.asdict(s) for s in stages],
            started=started.isoformat(timespec="seconds"),
            total_seconds=round(time.perf_counter() - start, 1),
            git_revision=git_revision(),
            quick=config.quick,
            models=list(config.models),
            platform=platform.platform(),
            timings=timings,
        )
        write_results(staging, document)
        (staging / "report.html").write_text(render_html(document, staging), encoding="utf-8")
        (staging / "report.md").write_text(render_markdown(document), encoding="utf-8")
        records_frame(records).to_csv(staging / "results.csv", index=False)
    return ReportResult(records, stages, config.out_dir)
