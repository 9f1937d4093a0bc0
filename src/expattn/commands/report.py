"""``expattn report``: verify -> simulate (all presets) -> probe (each model) -> a short training comparison.

``--stages`` picks a subset (always reported in that order). The stages run one after another in this
process, or side by side in ``jobs`` worker processes (``expattn.commands.workers``), longest first;
both give the same records in the same order. One rich progress display shows them. A stage that
raises is ``fail`` with its reason, and the other stages still run. A model that cannot be probed
here (unknown name, missing optional package, a folder the probe refuses with ``ValueError``) gives
``skipped`` records E1-E9 that carry the reason. Everything is written into a staging folder beside
``--out`` and moved into place at the end, so an interrupted run leaves no partial files.
"""

from __future__ import annotations

import dataclasses
import functools
import pickle
import platform
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from expattn.catalogue import ENTRIES
from expattn.catalogue.registry import RunContext
from expattn.commands.checks import claims, timed_claim
from expattn.commands.workers import Tell, side_by_side
from expattn.probes.models.loading import BUILTIN_MODELS
from expattn.probes.progress import Stage as ProbeStage
from expattn.report.document import Stage, cpu, wall
from expattn.report.html import render_html
from expattn.report.markdown import render_markdown
from expattn.results.frame import records_frame
from expattn.results.outputs import check_output_folder, output_folder
from expattn.results.record import Record, load_records, results_document
from expattn.results.timings import write_results
from expattn.seeds import check_seed

if TYPE_CHECKING:
    from expattn.probes.runner import ProbeOutcome

PROBE_IDS = tuple(e.id for e in ENTRIES if e.probe)
STAGES = ("verify", "simulate", "probe", "train")


@dataclass(frozen=True)
class ReportConfig:
    """Options of one report run.

    Attributes:
        out_dir: folder that receives results.json, results.csv, report.html, report.md and plots/.
        models: models to probe: built-in names (``minilm``, ``smollm2``, ``gemma3``) or paths of local HF model
            folders, at least one; by default ``minilm`` and ``smollm2``.
        quick: small sizes everywhere (smoke run, < 3 min).
        seed: seed of every stage.
        stages: the stages to run, a non-empty subset of ``STAGES``; they always run in the
            order of ``STAGES``.
        overwrite: write into a non-empty ``out_dir``, replacing a previous report (the one rule of
            output folders, ``expattn.results.outputs``).
        jobs: worker processes that run the stages side by side, each with its share of torch's threads
            (``workers.threads_per_job``); 1 runs them one after another in this process. The records are the
            same either way at the same threads per stage. The workers are spawned, so a script that sets
            ``jobs > 1`` needs Python's ``if __name__ == "__main__":`` guard (``multiprocessing``'s rule).
    """

    out_dir: Path = Path("report")
    models: tuple[str, ...] = ("minilm", "smollm2")
    quick: bool = False
    seed: int = 0
    stages: tuple[str, ...] = STAGES
    overwrite: bool = False
    jobs: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.out_dir, Path):
            raise TypeError(f"out_dir must be a pathlib.Path, got {type(self.out_dir).__name__}")
        if not isinstance(self.models, tuple) or not all(isinstance(m, str) and m for m in self.models):
            raise TypeError(f"models must be a tuple of non-empty strings, got {self.models!r}")
        if not self.models:
            raise ValueError("models must name at least one model (minilm, smollm2, gemma3 or a model folder), got "
                             "none")
        check_seed(self.seed)
        if not isinstance(self.stages, tuple) or not all(isinstance(s, str) for s in self.stages):
            raise TypeError(f"stages must be a tuple of stage names, got {self.stages!r}")
        unknown = [s for s in self.stages if s not in STAGES]
        if unknown or not self.stages:
            got = ", ".join(repr(s) for s in unknown) or "none"
            raise ValueError(f"stages must be a non-empty subset of {', '.join(STAGES)}, got {got}")
        if not isinstance(self.jobs, int) or isinstance(self.jobs, bool):
            raise TypeError(f"jobs must be an int, got {type(self.jobs).__name__}")
        if self.jobs < 1:
            raise ValueError(f"jobs must be >= 1 (worker processes), got {self.jobs}")

    @property
    def command(self) -> str:
        """The command line that reproduces this run."""
        quick = " --quick" if self.quick else ""
        stages = "" if set(self.stages) == set(STAGES) else f" --stages {','.join(self.chosen)}"
        return (f"expattn report --out {self.out_dir} --models {','.join(self.models)} --seed {self.seed}"
                f"{stages}{quick}")

    @property
    def chosen(self) -> tuple[str, ...]:
        """The selected stages in run order (each once)."""
        return tuple(s for s in STAGES if s in self.stages)


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


def _tag(record: Record, stage: str, plot_dir: str, **labels: str) -> Record:
    """Label a record with its stage and make its plot paths relative to the results file."""
    record.details.setdefault("stage", stage)
    for key, value in labels.items():
        record.details.setdefault(key, value)
    record.plots = [f"{plot_dir}/{p}" for p in record.plots]
    return record


def _placeholder(model: str, verdict: str, reason: str) -> list[Record]:
    """One record per probe claim for a model that could not be probed."""
    return [
        Record(id=i, kind="empirical", verdict=verdict, notes=f"model {model}: {reason}",
               details={"stage": "probe", "model": model})
        for i in PROBE_IDS
    ]


ProbeProgress = Callable[[int, int, ProbeStage], None]
ProbeModel = Callable[[str, RunContext, ProbeProgress], "ProbeOutcome"]


def probe_model(model: str, ctx: RunContext, progress: ProbeProgress) -> ProbeOutcome:
    """The probe of ``model`` at its preset size (``ProbeConfig.preset``) for ``ctx``'s seed and quickness, beside
    its random-init twin in full mode (``results.twin``: each record's twin control and ``training``), plots written
    into ``ctx.out_dir``: its records and per-hypothesis timings. The probe stage's default ``ProbeModel``."""
    from expattn.probes.runner import ProbeConfig, probe

    config = ProbeConfig.preset(model, quick=ctx.quick, seed=ctx.seed, twin=not ctx.quick)  # quick: a smoke run
    return probe(config, ctx.out_dir, progress=progress)


@dataclass(frozen=True)
class Unit:
    """One stage of a run: ``kind`` is one of ``STAGES``; a probe names its ``model`` and its plot folder ``slug``."""

    kind: str
    model: str = ""
    slug: str = ""

    @property
    def name(self) -> str:
        """The stage's name in the results: ``verify``, ``simulate``, ``probe <model>`` or ``train``."""
        return f"probe {self.model}" if self.kind == "probe" else self.kind


def units(config: ReportConfig) -> tuple[Unit, ...]:
    """The run's stages in report order: verify, simulate, one probe per model (each model once, in the given order,
    its plots in ``plots/probe-<folder name>``, numbered when two share a name), train."""
    out = [Unit(command) for command in ("verify", "simulate") if command in config.chosen]
    if "probe" in config.chosen:
        taken: set[str] = set()
        for model in dict.fromkeys(config.models):
            base = "probe-" + (re.sub(r"[^A-Za-z0-9_.-]", "_", Path(model).name) or "model")
            slug, n = base, 1
            while slug in taken:  # two folders with the same name
                n += 1
                slug = f"{base}-{n}"
            taken.add(slug)
            out.append(Unit("probe", model, slug))
    if "train" in config.chosen:
        out.append(Unit("train"))
    return tuple(out)


# Side by side, the stages start longest first (a probe of a model, then simulate, train, verify).
_LONGEST_FIRST = ("probe", "simulate", "train", "verify")


@dataclass
class UnitResult:
    """What one stage gave: its records, its row of the stage table and its checks' or hypotheses' wall seconds."""

    records: list[Record]
    stage: Stage
    timings: dict[str, dict[str, float]] | None = None


def _fresh(folder: Path) -> Path:
    """``folder``, made empty: a stage's own plot folder in the staging folder, which a previous attempt at the
    stage (its worker died under it) may have begun."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


class _Runner:
    """Runs one stage into the staging folder, telling the progress display what it does; ``probe`` measures one
    model."""

    def __init__(self, config: ReportConfig, staging: Path, tell: Tell, probe: ProbeModel) -> None:
        self.config, self.staging, self.tell, self.probe = config, staging, tell, probe
        self.timings: dict[str, dict[str, float]] | None = None  # check or hypothesis -> wall seconds

    def run(self, unit: Unit) -> UnitResult:
        """Time the stage (its body returns records, status, reason); an exception fails the stage only."""
        start, cpu_start = time.perf_counter(), time.process_time()
        try:
            if unit.kind == "probe":
                records, status, reason = self.probe_stage(unit)
            elif unit.kind == "train":
                records, status, reason = self.train_stage()
            else:
                records, status, reason = self.claims_stage(unit.kind)
        except Exception as err:
            records, status, reason = [], "fail", f"{type(err).__name__}: {err}"
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        return UnitResult(records, Stage(unit.name, status, wall, len(records), reason, cpu), self.timings)

    def claims_stage(self, command: str) -> tuple[list[Record], str, str]:
        chosen = claims(command)
        if not chosen:
            return [], "skipped", f"no {command} checks are registered"
        plot_dir = _fresh(self.staging / "plots" / command)
        ctx = RunContext(seed=self.config.seed, out_dir=plot_dir, quick=self.config.quick)
        out, self.timings = [], {}
        for claim in chosen:
            self.tell.describe(f"{command} {claim.name}")
            record, seconds = timed_claim(claim, ctx)
            out.append(_tag(record, command, f"plots/{command}"))
            self.timings[claim.name] = {"seconds": seconds}
            self.tell.advance()
        failed = sum(r.verdict == "fail" for r in out)
        errors = sum(r.verdict == "error" for r in out)
        reason = "; ".join(f"{n} of {len(out)} {what}" for n, what in ((failed, "failed"), (errors, "raised")) if n)
        return out, "ok", reason

    def probe_stage(self, unit: Unit) -> tuple[list[Record], str, str]:
        model = unit.model
        self.tell.describe(f"probe {escape(model)}: loading and tokenising")
        try:
            plot_dir = _fresh(self.staging / "plots" / unit.slug)

            def progress(done: int, total: int, stage: ProbeStage) -> None:
                self.tell.describe(f"probe {escape(model)}: {escape(str(stage))}")

            try:
                ctx = RunContext(seed=self.config.seed, out_dir=plot_dir, quick=self.config.quick)
                outcome = self.probe(model, ctx, progress)
            except (ImportError, ValueError) as err:
                reason = f"cannot probe this model here: {err}"
                return _placeholder(model, "skipped", reason), "skipped", reason
            except Exception as err:
                reason = f"probe raised {type(err).__name__}: {err}"
                return _placeholder(model, "error", reason), "fail", reason
            self.timings = outcome.timings
            return [_tag(r, "probe", f"plots/{unit.slug}", model=model) for r in outcome.records], "ok", ""
        finally:
            self.tell.advance()

    def train_stage(self) -> tuple[list[Record], str, str]:
        """The short training comparison: one small LM per normalization at the same token budget.

        Checkpoints stay in a temporary folder; the sweep's plot and its E1-E3 records (measured by
        the probe on each trained model's exported folder) go into the report.
        """
        self.tell.describe("train: one small LM per normalization")
        from expattn.commands.sweep_probe import probe_dynamics
        from expattn.sweeps.run import run_sweep
        from expattn.train.recipes import recipe

        plot_dir = _fresh(self.staging / "plots" / "train")
        try:
            with tempfile.TemporaryDirectory(prefix="expattn-sweep-") as tmp:
                base = recipe("sweep-quick" if self.config.quick else "sweep", Path(tmp), seed=self.config.seed,
                              device="cpu", progress=False)
                base = dataclasses.replace(base, ckpt_every=base.iters)  # one checkpoint, at the end
                run_sweep("norms", base, probe_dynamics)
                shutil.copyfile(Path(tmp) / "sweep.png", plot_dir / "sweep_norms.png")
                records = load_records(Path(tmp) / "sweep.json")
        finally:
            self.tell.advance()
        for record in records:
            record.plots = ["sweep_norms.png"]
        return [_tag(r, "train", "plots/train", name="train --sweep norms") for r in records], "ok", ""


def run_unit(config: ReportConfig, staging: Path, probe: ProbeModel, unit: Unit, tell: Tell) -> UnitResult:
    """One stage of the run, in this process or a worker's (``workers.side_by_side``)."""
    return _Runner(config, staging, tell, probe).run(unit)


def _lost(unit: Unit, error: BaseException) -> UnitResult:
    """The result of a stage whose worker process died under it."""
    reason = f"its worker process ended abruptly (killed, or out of memory?): {type(error).__name__}: {error}"
    records = _placeholder(unit.model, "error", reason) if unit.kind == "probe" else []
    return UnitResult(records, Stage(unit.name, "fail", None, len(records), reason, None))


class _Display:
    """The report's progress line: every step done out of all, and what each running stage is doing now."""

    def __init__(self, progress: Progress, total: int) -> None:
        self.progress = progress
        self.task = progress.add_task("report", total=total)
        self.doing: dict[int, str] = {}
        self.finished: set[int] = set()

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

    def _show(self) -> None:
        self.progress.update(self.task, description=" | ".join(self.doing.values()) or "report")


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


def run_stages(config: ReportConfig, staging: Path, display: _Display, probe: ProbeModel) -> list[UnitResult]:
    """Every stage of ``config``, in report order; side by side in ``config.jobs`` workers when there are more
    stages than one and more jobs than one."""
    todo = units(config)
    jobs = min(config.jobs, len(todo))
    if jobs == 1:
        results = []
        for i, unit in enumerate(todo):
            results.append(run_unit(config, staging, probe, unit, _Told(display, i)))
            display.finish(i)
        return results
    order = sorted(range(len(todo)), key=lambda i: _LONGEST_FIRST.index(todo[i].kind))
    got = side_by_side(functools.partial(run_unit, config, staging, probe), [todo[i] for i in order], jobs,
                       _Reordered(display, order))
    results: list[UnitResult] = [None] * len(todo)  # type: ignore[list-item]
    for k, i in enumerate(order):
        results[i] = got[k] if isinstance(got[k], UnitResult) else _lost(todo[i], got[k])
    return results


def _count(command: str) -> int:
    """Number of registered checks of ``command``; 0 when they cannot be loaded (the stage then fails)."""
    try:
        return len(claims(command))
    except Exception:
        return 0


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


def run_report(config: ReportConfig, console: Console, probe: ProbeModel = probe_model) -> ReportResult:
    """Run the chosen stages (verify, simulate, probe, train), then write results.json, results.csv,
    report.html, report.md and plots/.

    Args:
        config: the run's options (``ReportConfig``).
        console: where the progress display and the closing summary go.
        probe: the probe stage's measurement of one model, ``(model, ctx, progress) -> records`` (``probe_model``:
            the probe at its preset size).

    Returns:
        The ``ReportResult`` (records, per-stage timings, output folder). Raises ``ValueError``/``OSError``
        before any work if a model to probe is neither a known name nor a folder, if ``--out`` cannot
        be written, or the one rule of output folders refuses it (``expattn.results.outputs``).
    """
    unknown = unknown_models(config.models) if "probe" in config.chosen else []
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}: expected one of {', '.join(BUILTIN_MODELS)} or a model folder")
    if min(config.jobs, len(units(config))) > 1:
        try:
            pickle.dumps(probe)
        except (pickle.PicklingError, AttributeError, TypeError) as err:
            raise TypeError("probe must be a module-level function when jobs > 1 (it runs in a worker process): "
                            f"{err}") from err
    check_output_folder(config.out_dir, config.overwrite)
    with output_folder(config.out_dir, overwrite=config.overwrite) as staging:
        started = datetime.now(timezone.utc)
        start = time.perf_counter()
        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
        (staging / "plots").mkdir(exist_ok=True)
        with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
            chosen = config.chosen
            steps = {"verify": _count("verify") if "verify" in chosen else 0,
                     "simulate": _count("simulate") if "simulate" in chosen else 0,
                     "probe": len(set(config.models)) if "probe" in chosen else 0,
                     "train": int("train" in chosen)}
            display = _Display(progress, sum(steps.values()))
            results = run_stages(config, staging, display, probe)
            progress.update(display.task, description="writing report")
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
