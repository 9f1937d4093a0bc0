"""``expattn simulate`` end to end through typer's CliRunner: quick presets, schema, PNGs, custom runs, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from expattn.cli import app
from expattn.results.record import KINDS, SCHEMA_VERSION, VERDICTS, load_records

PRESETS = ("b2-collapse", "b3-expansion", "b4-normalization", "sphere-clusters", "b5-theorem1",
           "b6-continuous-carrier", "b7-tied-block")
PNG = b"\x89PNG\r\n\x1a\n"


def _invoke(*args: str):
    return CliRunner().invoke(app, ["simulate", *args])


@pytest.mark.slow
def test_quick_presets_write_results_and_plots(tmp_path):
    out = tmp_path / "sim"
    result = _invoke("--preset", ",".join(PRESETS), "--quick", "--out", str(out), "--seed", "1")
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["schema"] == SCHEMA_VERSION and doc["command"] == "simulate"
    assert doc["presets"] == list(PRESETS) or sorted(doc["presets"]) == sorted(PRESETS)
    records = load_records(out / "results.json")
    assert {r.details["preset"] for r in records} == set(PRESETS)
    for r in records:
        assert r.id in {"B2", "B3", "B4", "B5", "B6", "B7"} and r.kind in KINDS and r.verdict in VERDICTS
        assert r.verdict != "fail", (r.details["preset"], r.notes)
        assert len(r.plots) == 1 and (out / r.plots[0]).read_bytes()[:8] == PNG
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left


def test_unknown_preset_is_a_one_line_error(tmp_path):
    out = tmp_path / "sim"
    result = _invoke("--preset", "b9-nothing", "--out", str(out))
    assert result.exit_code == 2
    assert "unknown claim or preset b9-nothing" in result.output
    assert "Traceback" not in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_custom_run_and_its_errors(tmp_path, gen):
    cloud = np.random.default_rng(0).normal(size=(40, 3))
    good, bad = tmp_path / "cloud.npy", tmp_path / "atoms.npy"
    np.save(good, cloud)
    np.save(bad, np.ones((5, 4)))
    out = tmp_path / "custom"
    ok = _invoke("--preset", "custom", "--cloud", str(good), "--norm", "sphere", "--steps", "5", "--out", str(out))
    assert ok.exit_code == 0, ok.output
    (record,) = load_records(out / "results.json")
    assert record.id == "B4" and record.verdict == "inconclusive"
    assert len(record.details["median_per_step"]["trace_cov"]) == 6
    assert (out / "custom.png").read_bytes()[:8] == PNG
    for args, message in (
        (("--steps", "0"), "steps must be a positive integer"),
        (("--cloud", str(good), "--atoms", str(bad)), "expected (key, 3)"),
        (("--atoms", str(tmp_path / "missing.npy")), "atoms must be an existing .npy file"),
        (("--carrier", str(good)), "carrier must be one of empirical, gaussian_mixture"),
        (("--norm", "batchnorm"), "unknown normalization"),
        (("--cloud", "torus"), "existing .npy file"),
    ):
        result = _invoke("--preset", "custom", *args, "--out", str(tmp_path / "never"))
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output
        assert not (tmp_path / "never").exists()
    assert _invoke("--preset", "b2-collapse", "--steps", "-1", "--out", str(tmp_path / "never")).exit_code == 2
    ignored = _invoke("--preset", "b2-collapse", "--norm", "sphere", "--out", str(tmp_path / "never"))
    assert ignored.exit_code == 2 and "for --preset custom only" in ignored.output
    assert not (tmp_path / "never").exists()


def test_custom_carrier_and_atoms_are_separate_options(tmp_path):
    rng = np.random.default_rng(1)
    cloud, atoms = tmp_path / "cloud.npy", tmp_path / "atoms.npy"
    np.save(cloud, rng.normal(size=(30, 2)))
    np.save(atoms, rng.normal(size=(6, 2)))
    finals = {}
    for carrier in ("empirical", "gaussian_mixture"):
        out = tmp_path / carrier
        result = _invoke("--preset", "custom", "--cloud", str(cloud), "--atoms", str(atoms), "--carrier", carrier,
                         "--bandwidth", "1.0", "--norm", "identity", "--steps", "3", "--out", str(out))
        assert result.exit_code == 0, result.output
        (record,) = load_records(out / "results.json")
        assert record.details["config"]["carrier"] == carrier and record.details["config"]["atoms"] == str(atoms)
        finals[carrier] = record.metrics["final_trace_cov"]
    # the mixture adds Sigma eta = eta to each step (bandwidth 1), so its cloud grows faster than the empirical one
    assert finals["gaussian_mixture"] > 1.5 * finals["empirical"]


def test_out_that_is_a_file_is_an_error(tmp_path):
    target = tmp_path / "file.txt"
    target.write_text("x")
    result = _invoke("--preset", "custom", "--steps", "2", "--out", str(target))
    assert result.exit_code == 2 and "is not a folder" in result.output
    assert target.read_text() == "x"


def test_existing_out_folder_gets_new_files_with_overwrite(tmp_path):
    out = tmp_path / "sim"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    args = ("--preset", "custom", "--steps", "2", "--tokens", "8", "--dim", "2", "--out", str(out))
    refused = _invoke(*args)
    assert refused.exit_code == 2 and "pass --overwrite" in refused.output
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    result = _invoke(*args, "--overwrite")
    assert result.exit_code == 0, result.output
    assert (out / "keep.txt").read_text() == "mine" and (out / "results.json").is_file()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
