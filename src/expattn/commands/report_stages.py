"""One stage of ``expattn report``: what verify, simulate, one model's probe and the training comparison run.

``units(config)`` lists a run's stages in report order; ``run_unit`` runs one of them into the
report's staging folder, in this process or a worker's, and returns its records, its row of the
stage table and its timings. What each stage measures is ``Work``: the checks of a command
(``claims``), one model's probe (``probe``), one of its random-init twins (``twin``: a stage of its
own, so that the workers share a model's twins; ``attach_twins`` then gives each of the model's
records their verdicts as controls) and the training comparison (``train``), which ``run_report``
takes as arguments (a test gives stand-ins). A stage that raises is ``fail`` with its
reason; a model that cannot be probed here (unknown name, missing optional package, a folder the
probe refuses with ``ValueError``) gives ``skipped`` records, one per probe claim, that carry the reason.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape

from expattn.catalogue import ENTRIES, headlines
from expattn.catalogue.registry import Claim, RunContext
from expattn.commands.checks import claims, timed_claim
from expattn.commands.report_config import ReportConfig
from expattn.commands.workers import Tell
from expattn.probes.progress import Stage as ProbeStage
from expattn.report.document import Stage
from expattn.results.record import Record, load_records
from expattn.results.twin import attach_twin

if TYPE_CHECKING:
    from expattn.probes.runner import ProbeOutcome

PROBE_IDS = tuple(e.id for e in ENTRIES if e.probe)


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


ProbeTwin = Callable[[str, RunContext, ProbeProgress, int], list[Record]]


def probe_model(model: str, ctx: RunContext, progress: ProbeProgress) -> ProbeOutcome:
    """The probe of ``model`` at its preset size (``ProbeConfig.preset``) for ``ctx``'s seed, quickness and dtype,
    plots written into ``ctx.out_dir``: its records and per-hypothesis timings. The probe stage's default
    ``ProbeModel``."""
    from expattn.probes.runner import ProbeConfig, run_probe

    config = ProbeConfig.preset(model, quick=ctx.quick, seed=ctx.seed, dtype=ctx.dtype)
    return run_probe(config, ctx.out_dir, progress=progress)


def probe_model_twin(model: str, ctx: RunContext, progress: ProbeProgress, seed: int) -> list[Record]:
    """The records of ``model``'s random-init twin of initialisation ``seed`` on the token ids ``probe_model`` feeds
    the model at the same ``ctx`` (``twin_runs.probe_twin_of``). The twin stages' default ``ProbeTwin``."""
    from expattn.probes.runner import ProbeConfig
    from expattn.probes.twin_runs import probe_twin_of

    return probe_twin_of(ProbeConfig.preset(model, quick=ctx.quick, seed=ctx.seed, dtype=ctx.dtype), seed, progress)


def train_norms(config: ReportConfig, plot_dir: Path) -> list[Record]:
    """The short training comparison: one small LM per normalization at the same token budget, its sweep plot
    written to ``plot_dir / "sweep_norms.png"``; its E1-E3 records (the probe on each trained model's exported
    folder). Checkpoints stay in a temporary folder. The train stage's default ``Work.train``."""
    from expattn.commands.sweep_probe import probe_dynamics
    from expattn.sweeps.run import run_sweep
    from expattn.train.recipes import recipe

    with tempfile.TemporaryDirectory(prefix="expattn-sweep-") as tmp:
        base = recipe("sweep-quick" if config.quick else "sweep", Path(tmp), seed=config.seed, device="cpu",
                      progress=False)
        base = dataclasses.replace(base, ckpt_every=base.iters)  # one checkpoint, at the end
        run_sweep("norms", base, probe_dynamics)
        shutil.copyfile(Path(tmp) / "sweep.png", plot_dir / "sweep_norms.png")
        records = load_records(Path(tmp) / "sweep.json")
    for record in records:
        record.plots = ["sweep_norms.png"]
    return records


@dataclass(frozen=True)
class Work:
    """What the stages measure (module-level functions, so that they reach worker processes).

    Attributes:
        probe: one model's probe, ``(model, ctx, progress) -> ProbeOutcome`` (``probe_model``).
        claims: the registered checks of ``verify`` or ``simulate``, ``command -> [Claim]`` (``checks.claims``).
        train: the training comparison, ``(config, plot_dir) -> records`` (``train_norms``).
        twin: one of a model's random-init twins, ``(model, ctx, progress, seed) -> records``
            (``probe_model_twin``).
    """

    probe: ProbeModel = probe_model
    claims: Callable[[str], list[Claim]] = claims
    train: Callable[[ReportConfig, Path], list[Record]] = train_norms
    twin: ProbeTwin = probe_model_twin


@dataclass(frozen=True)
class Unit:
    """One stage of a run: ``kind`` is one of ``report.STAGES``; a probe names its ``model`` and its plot folder
    ``slug``, and a twin's stage (of kind ``probe``) its initialisation ``twin_seed``."""

    kind: str
    model: str = ""
    slug: str = ""
    twin_seed: int | None = None

    @property
    def name(self) -> str:
        """The stage's name in the results: ``verify``, ``simulate``, ``probe <model>``, ``probe <model>, twin
        seed <n>`` or ``train``."""
        if self.kind != "probe":
            return self.kind
        return f"probe {self.model}" + ("" if self.twin_seed is None else f", twin seed {self.twin_seed}")


def units(config: ReportConfig) -> tuple[Unit, ...]:
    """The run's stages in report order: verify, simulate, one probe per model (each model once, in the given order,
    its plots in ``plots/probe-<folder name>``, numbered when two share a name) followed by its twins'
    (``ReportConfig.twin_seeds``), train."""
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
            out += [Unit("probe", model, slug), *(Unit("probe", model, slug, seed) for seed in config.twin_seeds)]
    if "train" in config.chosen:
        out.append(Unit("train"))
    return tuple(out)


@dataclass
class UnitResult:
    """What one stage gave: its records, its row of the stage table and its checks' or hypotheses' wall seconds; a
    twin's stage gives no records of its own but the twin's (``twins``), which become controls of its model's."""

    records: list[Record]
    stage: Stage
    timings: dict[str, dict[str, float]] | None = None
    twins: list[Record] | None = None


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

    def __init__(self, config: ReportConfig, staging: Path, tell: Tell, work: Work) -> None:
        self.config, self.staging, self.tell, self.work = config, staging, tell, work
        self.timings: dict[str, dict[str, float]] | None = None  # check or hypothesis -> wall seconds

    def run(self, unit: Unit) -> UnitResult:
        """Time the stage (its body returns records, status, reason); an exception fails the stage only."""
        start, cpu_start = time.perf_counter(), time.process_time()
        twins = None
        try:
            if unit.kind == "probe" and unit.twin_seed is not None:
                twins, status, reason = self.twin_stage(unit)
                records = []
            elif unit.kind == "probe":
                records, status, reason = self.probe_stage(unit)
            elif unit.kind == "train":
                records, status, reason = self.train_stage()
            else:
                records, status, reason = self.claims_stage(unit.kind)
        except Exception as err:
            records, status, reason = [], "fail", f"{type(err).__name__}: {err}"
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        return UnitResult(records, Stage(unit.name, status, wall, len(records), reason, cpu), self.timings, twins)

    def claims_stage(self, command: str) -> tuple[list[Record], str, str]:
        chosen = self.work.claims(command)
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
                ctx = RunContext(seed=self.config.seed, out_dir=plot_dir, quick=self.config.quick,
                                 dtype=self.config.dtype)
                outcome = self.work.probe(model, ctx, progress)
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

    def twin_stage(self, unit: Unit) -> tuple[list[Record], str, str]:
        """One random-init twin of ``unit.model``: its records (``Work.twin``), ``ok`` when every one was measured;
        ``skipped`` with the reason where the model cannot be probed here, as its own stage is."""
        model = unit.model
        self.tell.describe(f"probe {escape(model)}, twin seed {unit.twin_seed}: loading")
        try:
            ctx = RunContext(seed=self.config.seed, out_dir=None, quick=self.config.quick, dtype=self.config.dtype)

            def progress(done: int, total: int, stage: ProbeStage) -> None:
                self.tell.describe(f"probe {escape(model)}, twin seed {unit.twin_seed}: {escape(str(stage))}")

            try:
                twins = self.work.twin(model, ctx, progress, unit.twin_seed)
            except (ImportError, ValueError) as err:
                return [], "skipped", f"cannot probe this model here: {err}"
        finally:
            self.tell.advance()
        errors = [r for r in twins if r.verdict == "error"]
        return twins, "fail" if errors else "ok", errors[0].notes if errors else ""

    def train_stage(self) -> tuple[list[Record], str, str]:
        """The training comparison (``Work.train``) with its plot in ``plots/train``."""
        self.tell.describe("train: one small LM per normalization")
        try:
            records = self.work.train(self.config, _fresh(self.staging / "plots" / "train"))
        finally:
            self.tell.advance()
        return [_tag(r, "train", "plots/train", name="train --sweep norms") for r in records], "ok", ""


def run_unit(config: ReportConfig, staging: Path, work: Work, unit: Unit, tell: Tell) -> UnitResult:
    """One stage of the run, in this process or a worker's (``workers.side_by_side``)."""
    return _Runner(config, staging, tell, work).run(unit)


def lost(unit: Unit, error: BaseException) -> UnitResult:
    """The result of a stage that gave no result from its worker process: the process died under it
    (``BrokenProcessPool``), or its result or arguments could not cross between the processes."""
    if isinstance(error, BrokenProcessPool):
        reason = f"{error} again (killed, or out of memory?)"
    else:
        reason = f"it could not run in a worker process: {type(error).__name__}: {error}"
    records = _placeholder(unit.model, "error", reason) if unit.kind == "probe" and unit.twin_seed is None else []
    return UnitResult(records, Stage(unit.name, "fail", None, len(records), reason, None))


def attach_twins(todo: Sequence[Unit], results: Sequence[UnitResult]) -> None:
    """Each probed model's records (``results`` in the order of ``todo``) with its twins' verdicts as controls and
    its ``training`` classes (``results.twin.attach_twin``); a twin whose stage gave nothing counts as ``skipped``,
    so its model's classes are ``undecided``. A model whose own stage failed keeps its placeholder records."""
    for unit, result in zip(todo, results, strict=True):
        if unit.kind != "probe" or unit.twin_seed is not None or result.stage.status != "ok":
            continue
        theirs = [(u.twin_seed, r.twins or []) for u, r in zip(todo, results, strict=True)
                  if u.kind == "probe" and u.slug == unit.slug and u.twin_seed is not None]
        if theirs:
            attach_twin(result.records, [t for _, t in theirs], headlines(), [seed for seed, _ in theirs])


def _count(claims_of: Callable[[str], list[Claim]], command: str) -> int:
    """Number of registered checks of ``command``; 0 when they cannot be loaded (the stage then fails)."""
    try:
        return len(claims_of(command))
    except Exception:
        return 0


def steps(config: ReportConfig, work: Work) -> int:
    """The steps the progress bar counts: each check of verify and simulate, each model's probe and each of its
    twins, the training."""
    chosen = config.chosen
    return (sum(_count(work.claims, command) for command in ("verify", "simulate") if command in chosen)
            + (len(set(config.models)) * (1 + len(config.twin_seeds)) if "probe" in chosen else 0)
            + int("train" in chosen))


def rerun(result: UnitResult, how: str) -> UnitResult:
    """``result`` of a stage that ran again alone after its first worker died (``how``: ``signal 9``), its reason
    saying so first."""
    said = f"worker died ({how}); re-ran alone"
    reason = f"{said}; {result.stage.reason}" if result.stage.reason else said
    return dataclasses.replace(result, stage=dataclasses.replace(result.stage, reason=reason))
