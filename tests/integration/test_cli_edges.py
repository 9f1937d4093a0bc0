"""Hostile command lines: each ends in one true ``error:`` line (exit 2) naming what was expected, before any
work and with nothing left behind; ``--version`` prints the package version."""

from __future__ import annotations

import numpy as np
import pytest
from cli_checks import one_line_error
from typer.testing import CliRunner

import expattn
from expattn.cli import app


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["probe", "--device", "meta"], ("device must be cpu, cuda or cuda:N", "'meta'", "no values")),
        (["report", "--models", ""], ("models must name at least one model",)),
        (["report", "--models", " , "], ("models must name at least one model",)),
        (["probe", "--seed", "abc"], ("'--seed'", "integer")),
        (["probe", "--tokens", "1e3"], ("'--tokens'", "integer")),
        (["simulate", "--steps", "x"], ("'--steps'", "integer")),
        (["simulate", "--no-such-option", "1"], ("No such option", "--no-such-option")),
    ],
    ids=["probe-meta", "report-no-models", "report-blank-models", "seed-abc", "tokens-float", "steps-text",
         "unknown-option"],
)
def test_hostile_options_are_one_line(tmp_path, args, fragments):
    one_line_error(CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")]), *fragments)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_command_is_one_line():
    one_line_error(CliRunner().invoke(app, ["frobnicate"]), "No such command", "frobnicate")


def test_no_arguments_still_show_the_help():
    result = CliRunner().invoke(app, [])
    assert "Commands" in result.output and "error:" not in result.output


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"expattn {expattn.__version__}"


def test_a_text_file_as_cloud_says_the_format(tmp_path):
    cloud = tmp_path / "cloud.npy"
    cloud.write_text("not an array\n")
    result = CliRunner().invoke(app, ["simulate", "--only", "custom", "--cloud", str(cloud),
                                      "--out", str(tmp_path / "o")])
    one_line_error(result, "is not a NumPy .npy array", "(token, dim)", "numpy.save")
    assert "pickle" not in result.output


def test_a_one_character_corpus_says_it_is_too_short(tmp_path):
    corpus = tmp_path / "one.txt"
    corpus.write_text("a")
    result = CliRunner().invoke(app, ["train", "--corpus", str(corpus), "--out", str(tmp_path / "o")])
    one_line_error(result, "too short for one training sequence", "context 64 needs 65 characters",
                   "0 (train) and 1 (validation)")
    assert "[1, -1]" not in result.output


@pytest.mark.parametrize(("fill", "said"), [(1e20, "all 4 coordinates equal (1e+20)"), (0.0, "is the zero vector")])
def test_a_degenerate_cloud_is_named_as_such(tmp_path, fill, said):
    cloud = tmp_path / "cloud.npy"
    np.save(cloud, np.full((16, 4), fill, dtype=np.float32))
    result = CliRunner().invoke(app, ["simulate", "--only", "custom", "--cloud", str(cloud),
                                      "--out", str(tmp_path / "o")])
    one_line_error(result, "the cloud is degenerate", said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cloud.npy"]


def test_a_varied_cloud_of_large_values_still_runs(tmp_path):
    cloud = tmp_path / "cloud.npy"  # the control: the same size and magnitude, tokens that vary
    np.save(cloud, np.random.default_rng(0).normal(size=(16, 4)) * 1e20)
    result = CliRunner().invoke(app, ["simulate", "--only", "custom", "--cloud", str(cloud), "--steps", "3",
                                      "--out", str(tmp_path / "o")])
    assert result.exit_code == 0 and "error:" not in result.output, result.output
