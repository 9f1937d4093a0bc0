"""One seed of ``expattn probe --seeds``, its finished stages kept on disk as it goes, so that a run stopped
between them goes on from the last one (``--resume``): the model's run, then each random-init twin (a seed of the
bfloat16 Qwen2.5 1.5B beside three twins takes about 85 minutes on a two-core CPU, a twin about 20).

``out/seed-N.unfinished/`` holds ``model/`` (the model's plots as they are drawn, then its ``results.json`` and
``timings.json`` without the twins' verdicts, once its run is done) and one ``twin-S.json`` per twin done (its
records). When the last twin is done, ``model/`` gets the records with the twins attached and becomes
``out/seed-N`` by one rename, and the unfinished folder goes. Nothing is kept of a stage a stop cut short: a
``model/`` without ``results.json`` is probed again, and a failure before the model's run is done leaves no
unfinished folder behind."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from expattn.probes.overlap import release_heap
from expattn.probes.runner import ProbeConfig, ProbeOutcome, run_probe
from expattn.probes.twin_runs import twins_after
from expattn.results.files import RESULTS, replace_dir, write_json_atomic
from expattn.results.record import Record, load_records, results_document
from expattn.results.timings import read_document, write_results

UNFINISHED = ".unfinished"
RESUMABLE = ("memory_budget",)  # settings a resumed seed may differ in: they decide passes, not numbers


@dataclass
class SeedStages:
    """The stages of ``config``'s seed kept in ``folder`` (``out/seed-N.unfinished``); ``runner.Stages``."""

    folder: Path
    config: ProbeConfig

    @property
    def model_dir(self) -> Path:
        return self.folder / "model"

    def model(self) -> ProbeOutcome | None:
        """The model's outcome kept here (no drawings: its plots are files), or ``None``."""
        return read_seed(self.model_dir, self.config)

    def keep_model(self, outcome: ProbeOutcome) -> None:
        write_results(self.model_dir, outcome.document())

    def twin(self, seed: int) -> tuple[list[Record], float] | None:
        path = self.folder / f"twin-{seed}.json"
        if not path.is_file():
            return None
        return load_records(path), float(json.loads(path.read_text(encoding="utf-8")).get("seconds", 0.0))

    def keep_twin(self, seed: int, records: list[Record], seconds: float) -> None:
        write_json_atomic(self.folder / f"twin-{seed}.json",
                          results_document(records, "probe twin", twin_seed=seed, seconds=seconds))


def probe_seed(config: ProbeConfig, folder: Path, progress: Callable[..., None] | None = None,
               resume: bool = False) -> ProbeOutcome:
    """``run_probe(config)`` with its plots, ``results.json`` and ``timings.json`` published as ``folder`` once
    done, its stages kept beside it meanwhile; with ``resume``, from the stages a stopped run kept there.

    Raises:
        ValueError: as ``run_probe``, or the kept stages were measured with other settings (``read_seed``).
    """
    stages = SeedStages(folder.with_name(folder.name + UNFINISHED), config)
    model = stages.model() if resume else None
    if model is None:  # nothing finished to go on from: a fresh start
        shutil.rmtree(stages.folder, ignore_errors=True)
        stages.model_dir.mkdir(parents=True)
    try:
        if model is None:
            release_heap()  # the last seed's model and statistics go back before this one's load
            outcome = run_probe(config, stages.model_dir, progress, stages=stages)
        else:
            kept = sorted(int(p.stem.removeprefix("twin-")) for p in stages.folder.glob("twin-*.json"))
            print(f"--resume: {folder.name}: the model's run" + (f" and twins {', '.join(map(str, kept))}" if kept
                  else "") + f" read back from {stages.folder}", file=sys.stderr)
            outcome = twins_after(model, config, stages, progress)
        write_results(stages.model_dir, outcome.document())
        replace_dir(stages.model_dir, folder)
    except BaseException:
        if not (stages.model_dir / RESULTS).is_file():
            shutil.rmtree(stages.folder, ignore_errors=True)
        raise
    shutil.rmtree(stages.folder)
    return outcome


def read_finished(folder: Path, config: ProbeConfig) -> ProbeOutcome | None:
    """``read_seed(folder, config)`` of a finished seed, its unfinished folder removed once it is read back: a stop
    between publishing the seed and removing its stages leaves them behind, finished."""
    outcome = read_seed(folder, config)
    if outcome is not None:
        shutil.rmtree(folder.with_name(folder.name + UNFINISHED), ignore_errors=True)
    return outcome


def read_seed(folder: Path, config: ProbeConfig) -> ProbeOutcome | None:
    """The outcome a finished seed (or a kept model's run) left in ``folder`` (its ``results.json`` and
    ``timings.json``), or ``None`` when ``folder`` holds no results.

    Raises:
        ValueError: the results were measured with settings other than ``config``'s (the first one is named).
    """
    if not (folder / RESULTS).is_file():
        return None
    document = read_document(folder / RESULTS)
    wanted = {k: v for k, v in json.loads(json.dumps(asdict(config))).items() if k not in RESUMABLE}
    found = {k: v for k, v in document.get("config", {}).items() if k not in RESUMABLE}
    for key in wanted:
        if found.get(key) != wanted[key]:
            raise ValueError(f"--resume: {folder} was probed with {key}={found.get(key)!r}, this run asks "
                             f"{key}={wanted[key]!r}; choose another --out, or --overwrite")
    return ProbeOutcome(
        load_records(folder / RESULTS), document["tokens"], document["sequences"], document.get("seconds", 0.0),
        document.get("forward_seconds", 0.0), document.get("stats_seconds", 0.0),
        document.get("forward_cpu_seconds", 0.0), document.get("stats_cpu_seconds", 0.0), document["model"],
        document["config"], document.get("timings", {}), passes=document.get("passes", []),
    )
