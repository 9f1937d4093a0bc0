"""``expattn report`` with its stages side by side in worker processes: the same results as one after another, a
stage whose worker dies fails alone, and an interrupted run leaves neither files nor workers behind."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
import stand_in_probes
import torch
from rich.console import Console
from typer.testing import CliRunner

from expattn.cli import app
from expattn.commands.report import ReportConfig, run_report
from expattn.commands.report_config import DEFAULTS
from expattn.commands.report_stages import PROBE_IDS, units
from expattn.commands.workers import THREAD_VARIABLES, auto_jobs, threads_per_job

TESTS = Path(__file__).resolve().parents[1]


def report(out: Path, probe=None, twin=None, **options):
    """``run_report`` into ``out``; with a stand-in ``probe`` and no stand-in ``twin``, no twin stages (they would
    probe a real twin)."""
    quiet = {"twin_inits": 0} if probe is not None and twin is None else {}
    config = ReportConfig(out_dir=out, overwrite=True, **{**quiet, **options})
    console = Console(file=io.StringIO(), width=120)
    stand_ins = {name: f for name, f in (("probe", probe), ("twin", twin)) if f is not None}
    return run_report(config, console, **stand_ins)


@pytest.mark.slow
def test_side_by_side_gives_the_bytes_of_one_after_another(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, **dict.fromkeys(THREAD_VARIABLES, "1")}  # one after another rounds as a worker does
    command = [sys.executable, "-m", "expattn.cli", "report", "--out", str(out), "--overwrite", "--models", "minilm",
               "--stages", "verify,probe", "--quick", "--jobs"]
    alone = subprocess.run([*command, "1"], env=env, capture_output=True, text=True)
    assert alone.returncode == 0, alone.stderr[-2000:]
    first = (out / "results.json").read_bytes()
    beside = subprocess.run([*command, "2"], env=env, capture_output=True, text=True)
    assert beside.returncode == 0, beside.stderr[-2000:]
    assert (out / "results.json").read_bytes() == first
    doc = json.loads(first)
    assert [s["name"] for s in doc["stages"]] == ["verify", "probe minilm"] and len(doc["records"]) > len(PROBE_IDS)


def test_a_stage_whose_worker_dies_fails_alone_and_one_that_died_beside_another_runs_again(tmp_path, capfd):
    models = [tmp_path / name for name in ("dies", "dies-beside-another", "lives")]
    for folder in models:
        folder.mkdir()
    result = report(tmp_path / "out", probe=stand_in_probes.dies, models=tuple(map(str, models)),
                    stages=("probe",), jobs=2)
    status = {s.name.split("/")[-1]: (s.status, s.records) for s in result.stages}
    assert status == {"dies": ("fail", len(PROBE_IDS)), "dies-beside-another": ("ok", 1), "lives": ("ok", 1)}
    dead = [r for r in result.records if r.details["model"] == str(models[0])]
    assert [r.id for r in dead] == list(PROBE_IDS) and {r.verdict for r in dead} == {"error"}
    assert "worker died (exit code 3) again" in dead[0].notes and not result.ok
    reasons = {s.name.split("/")[-1]: s.reason for s in result.stages}
    assert reasons["dies-beside-another"] == "worker died (exit code 3); re-ran alone"  # said aloud, not just "ok"
    assert reasons["dies"].startswith("worker died (exit code 3); re-ran alone; worker died (exit code 3) again")
    assert reasons["lives"] in ("", "worker died (exit code 3); re-ran alone")  # in flight or not when one died
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("report: the worker of stage")]
    assert len(said) >= 2 and all("died (exit code 3); it re-ran alone" in line for line in said)
    assert "stage probe " + str(models[0]) + " failed (worker died" in result.failures
    pids = {r.details["model"]: r.details["pid"] for r in result.records if "pid" in r.details}
    assert os.getpid() not in pids.values()  # they ran in workers
    threads = {r.details["threads"] for r in result.records if "threads" in r.details}
    assert threads == {threads_per_job(2)}  # the one that ran again alone had the same share
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [s["name"] for s in doc["stages"]] == [f"probe {m}" for m in models]  # the report's order


def test_the_longest_stages_start_first_and_the_report_keeps_its_order(tmp_path):
    models = [tmp_path / name for name in ("a", "b")]
    for folder in models:
        folder.mkdir()
    config = ReportConfig(out_dir=tmp_path / "out", models=(str(models[0]), str(models[0]), str(models[1])))
    twin_stages = [f"twin seed {seed}" for seed in range(DEFAULTS.twin_inits)]
    assert [u.name for u in units(config)] == ["verify", "simulate", *(f"probe {m}{s}" for m in models[:2]
                                                                     for s in ("", *(f", {t}" for t in twin_stages))),
                                               "train"]
    assert [u.name for u in units(replace(config, quick=True))] == ["verify", "simulate", f"probe {models[0]}",
                                                                   f"probe {models[1]}", "train"]
    same_name = ReportConfig(models=(str(models[0]), str(tmp_path / "x" / "a")))
    assert [u.slug for u in units(same_name) if u.kind == "probe" and u.twin_seed is None] == ["probe-a", "probe-a-2"]
    result = report(tmp_path / "out", probe=stand_in_probes.probe, models=tuple(map(str, models)),
                    stages=("probe",), jobs=2)
    assert result.ok and [r.details["model"] for r in result.records] == list(map(str, models))
    plots = tmp_path / "out" / "plots"
    assert sorted(p.name for p in plots.iterdir()) == ["probe-a", "probe-b"]


def test_twins_are_stages_of_their_own_and_their_verdicts_classify_the_models_records(tmp_path):
    """Each model's three twins run as stages beside it, in other workers too; their verdicts become the model's
    controls. A twin whose worker dies (seed 5 of ``twin-dies``, also when re-run alone) fails its own stage only,
    and its model's class is then ``undecided``: the rule needs every twin."""
    models = [tmp_path / name for name in ("a", "twin-dies")]
    for folder in models:
        folder.mkdir()
    result = report(tmp_path / "out", probe=stand_in_probes.probe, twin=stand_in_probes.twin,
                    models=tuple(map(str, models)), stages=("probe",), jobs=2, seed=4)
    status = {s.name.split("/")[-1]: (s.status, s.records) for s in result.stages}
    assert status == {"a": ("ok", 1), **{f"a, twin seed {s}": ("ok", 0) for s in (4, 5, 6)},
                      "twin-dies": ("ok", 1), "twin-dies, twin seed 4": ("ok", 0),
                      "twin-dies, twin seed 5": ("fail", 0), "twin-dies, twin seed 6": ("ok", 0)}, status
    a, dies = result.records
    assert a.training == "learned" and dies.training == "undecided"
    assert [c.name for c in a.controls] == [f"random-init twin, seed {s}" for s in (4, 5, 6)]
    assert a.details["twins"]["values"] == [4.0, 5.0, 6.0]
    assert [c.verdict for c in dies.controls] == ["not_supported", "skipped", "not_supported"]
    assert "worker died" in next(s.reason for s in result.stages if s.name.endswith("twin-dies, twin seed 5"))


def test_jobs_share_the_threads_and_default_to_one_per_thread():
    threads = torch.get_num_threads()
    assert threads_per_job(1) == threads and threads_per_job(threads) == 1 and threads_per_job(threads + 1) == 1
    assert auto_jobs(5) == min(5, threads) and auto_jobs(1) == 1


@pytest.mark.parametrize(("jobs", "error"), [(0, ValueError), (-2, ValueError), (True, TypeError), (1.5, TypeError)])
def test_jobs_must_be_a_positive_int(jobs, error):
    with pytest.raises(error, match="jobs"):
        ReportConfig(jobs=jobs)


def test_cli_refuses_zero_jobs_in_one_line(tmp_path):
    result = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "o"), "--jobs", "0"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "jobs must be >= 1" in lines[0], result.output
    assert list(tmp_path.iterdir()) == []


def test_a_probe_that_cannot_reach_a_worker_is_refused_before_any_stage(tmp_path):
    (tmp_path / "m").mkdir()
    with pytest.raises(TypeError, match="probe must be a module-level function"):
        report(tmp_path / "out", probe=lambda model, ctx, progress: None, models=(str(tmp_path / "m"),),
               stages=("verify", "probe"), jobs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]


@pytest.mark.slow
def test_sigterm_ends_the_workers_and_leaves_no_files(tmp_path):
    models = [tmp_path / name for name in ("a", "b")]
    for folder in models:
        folder.mkdir()
    script = textwrap.dedent(f"""
        import io, sys
        sys.path.insert(0, {str(TESTS)!r})
        from pathlib import Path
        from rich.console import Console
        import stand_in_probes
        from expattn.commands.report import ReportConfig, run_report
        from expattn.terminal import interrupt_on_sigterm
        interrupt_on_sigterm()
        config = ReportConfig(out_dir=Path({str(tmp_path / "out")!r}), models={tuple(map(str, models))!r},
                              stages=("probe",), jobs=2, twin_inits=0)
        run_report(config, Console(file=io.StringIO()), probe=stand_in_probes.waits)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not all((m / "pid").exists() for m in models) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    time.sleep(0.2)  # the pid files are complete
    workers = [int((m / "pid").read_text()) for m in models]
    os.kill(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, proc.stderr.read().decode()[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # no staging folder, no partial report
    deadline = time.monotonic() + 30
    while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(pid) for pid in workers)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")  # a zombie has ended


def test_without_process_semaphores_the_stages_run_one_after_another(tmp_path, monkeypatch):
    import multiprocessing.context

    from expattn.commands import workers

    assert workers.usable()

    def no_semaphores(self, *args, **kwargs):
        raise OSError(38, "Function not implemented")  # what SemLock raises without /dev/shm

    monkeypatch.setattr(multiprocessing.context.SpawnContext, "Queue", no_semaphores)
    assert not workers.usable()
    (tmp_path / "m").mkdir()
    seen = []
    result = report(tmp_path / "out", probe=lambda model, ctx, progress: seen.append(model) or
                    stand_in_probes.probe(model, ctx, progress), models=(str(tmp_path / "m"),),
                    stages=("verify", "probe"), jobs=2)  # a lambda: it can only run in this process
    assert result.ok and seen == [str(tmp_path / "m")]
    assert {r.details["pid"] for r in result.records if "pid" in r.details} == {os.getpid()}


def test_a_stage_without_a_result_says_why():
    from concurrent.futures.process import BrokenProcessPool

    from expattn.commands.report_stages import Unit, lost

    died = lost(Unit("probe", "m", "probe-m"), BrokenProcessPool("worker died (signal 9)"))
    assert died.stage.status == "fail" and died.stage.reason.startswith("worker died (signal 9) again")
    assert len(died.records) == len(PROBE_IDS)
    unsent = lost(Unit("simulate"), TypeError("cannot pickle '_thread.lock' object"))
    assert unsent.records == [] and unsent.stage.reason.startswith("it could not run in a worker process: TypeError")
