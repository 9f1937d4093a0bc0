"""A crash is an ``error``, never a verdict: an exception injected into one estimator's update or analysis gives
that hypothesis an ``error`` record (the exception and its traceback), the others are still measured, and
``expattn probe`` exits 1 (not 0 as for a success, not 2 as for a user's mistake)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny_models import save_tiny
from typer.testing import CliRunner

import expattn
from expattn.cli import app
from expattn.probes.hypotheses import hypotheses
from expattn.probes.hypotheses.e3_gaussianity import E3Gaussianity
from expattn.probes.hypotheses.e5_gradient import E5Gradient
from expattn.probes.runner import ESTIMATORS
from expattn.results.record import Record, enforce_controls

CRASHES = {
    "TypeError": TypeError("an estimator's bug"),
    "MemoryError": MemoryError(),
    "OutOfMemoryError": torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return save_tiny("bert", tmp_path_factory.mktemp("errors") / "tiny-bert", seed=1, intermediate_size=48)


def _probe(model_dir: Path, overlap: bool | None) -> dict[str, Record]:
    from expattn.probes.runner import ProbeConfig, run_probe

    config = ProbeConfig(model=str(model_dir), tokens=256, seq_len=32, batch_size=4, replicates=20,
                         detail_sequences=2)
    return {r.id: r for r in run_probe(config, None, speedups=overlap).records}


@pytest.mark.parametrize("overlap", [False, True], ids=["synchronous", "worker-thread"])
@pytest.mark.parametrize("crash", list(CRASHES))
def test_an_analysis_that_raises_is_an_error_and_the_others_are_measured(model_dir, monkeypatch, crash, overlap):
    def measure(self):
        raise CRASHES[crash]

    monkeypatch.setattr(E5Gradient, "measure", measure)
    records = _probe(model_dir, overlap)
    e5 = records["E5"]
    assert e5.verdict == "error" and not e5.ok
    assert e5.notes.startswith(f"analysis raised {crash}")
    assert f"{crash}" in e5.details["traceback"] and "measure" in e5.details["traceback"]
    others = [r for k, r in records.items() if k != "E5"]
    assert len(others) == len(hypotheses()) - 1 and all(r.verdict != "error" for r in others)


@pytest.mark.parametrize("stage", ["update", "measure"])
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=[cls.claim for cls in ESTIMATORS])
def test_any_estimator_that_raises_gives_error_for_it_alone(model_dir, monkeypatch, estimator, stage):
    def crash(self, *args):
        raise TypeError("injected")

    monkeypatch.setattr(estimator, stage, crash)
    hit = {cls.claim for cls in ESTIMATORS if getattr(cls, stage) is crash}  # E9 inherits E4's code
    records = _probe(model_dir, None)
    assert estimator.claim in hit
    for claim in hit:
        assert records[claim].verdict == "error"
        assert records[claim].notes == f"{'analysis' if stage == 'measure' else 'update'} raised TypeError: injected"
    assert all(r.verdict != "error" for k, r in records.items() if k not in hit)


def test_an_update_that_raises_is_an_error_not_a_users_mistake(model_dir, monkeypatch):
    calls = []

    def update(self, i, tensors, batch):
        calls.append(i)
        raise ValueError("a bug inside an update")

    monkeypatch.setattr(E3Gaussianity, "update", update)
    records = _probe(model_dir, False)
    assert records["E3"].verdict == "error"
    assert records["E3"].notes == "update raised ValueError: a bug inside an update"
    assert calls == [0]  # not updated again after its first failure
    assert all(r.verdict != "error" for k, r in records.items() if k != "E3")


def test_the_cli_exits_1_and_writes_the_other_records(model_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(E3Gaussianity, "update", lambda self, i, tensors, batch: 1 / 0)
    out = tmp_path / "o"
    result = CliRunner().invoke(app, ["probe", "--model", str(model_dir), "--tokens", "256", "--seq-len", "32",
                                      "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    verdicts = {r["id"]: r["verdict"] for r in json.loads((out / "results.json").read_text())["records"]}
    assert verdicts["E3"] == "error" and set(verdicts) == set(hypotheses())
    assert sum(v == "error" for v in verdicts.values()) == 1


def test_the_python_api_reports_the_error_and_saves_it(model_dir, monkeypatch, tmp_path):
    monkeypatch.setattr(E5Gradient, "measure", lambda self: [][1])
    results = expattn.probe(str(model_dir), tokens=256, seq_len=32, batch_size=4, replicates=20, detail_sequences=2)
    assert results.verdicts["E5"] == "error"
    results.save(tmp_path / "o")  # draws the plots again: the error record is kept, not analysed again
    document = json.loads((tmp_path / "o" / "results.json").read_text())
    saved = {r["id"]: r for r in document["records"]}
    assert saved["E5"]["verdict"] == "error" and saved["E5"]["notes"].startswith("analysis raised IndexError")
    assert "timings" not in document
    timings = json.loads((tmp_path / "o" / "timings.json").read_text())["timings"]
    assert timings == results.timings  # the error's timing too, beside the records
    assert set(results.timings["E5"]) == {"update_seconds", "result_seconds"}


def test_an_error_is_not_ok_and_controls_do_not_demote_it():
    from expattn.results.record import Control

    record = Record("E5", "empirical", "error", notes="analysis raised TypeError: x",
                    controls=[Control("c", "negative", "pass")])
    assert not record.ok
    assert enforce_controls(record).verdict == "error"
