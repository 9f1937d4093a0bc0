"""Hostile command lines: seeds out of range, contradictory flags, and folder names that look like rich markup."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from expattn.cli import app

TINY = ["--layers", "1", "--dim", "8", "--heads", "2", "--context", "8", "--batch", "4", "--iters", "2",
        "--eval-every", "2", "--ckpt-every", "2", "--no-progress", "--device", "cpu"]


def _one_line_error(result, fragment):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], result.output


@pytest.fixture
def corpus(gen, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join("abcdef \n"[i] for i in torch.randint(0, 8, (2000,), generator=gen).tolist()))
    return path


COMMANDS = [["verify"], ["simulate", "--preset", "custom"], ["probe", "--out", "{tmp}/p"],
            ["train", "--out", "{tmp}/t"], ["report", "--out", "{tmp}/r"]]


@pytest.mark.parametrize("seed", ["-1", str(2**63), str(2**64), str(2**70)])
@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_one_seed_rule_before_any_work(tmp_path, command, seed):
    args = [a.format(tmp=tmp_path) for a in command]
    _one_line_error(CliRunner().invoke(app, [*args, "--seed", seed]), "seed must be an integer in [0, 2**63)")
    assert list(tmp_path.iterdir()) == []  # refused before anything was written or loaded


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["train", "--sweep", "norms", "--norm", "rmsnorm"], "leave out --norm"),
        (["train", "--sweep", "carriers", "--carrier", "gaussian_mixture"], "leave out --carrier"),
        (["train", "--sweep", "carriers", "--implicit"], "leave out --implicit"),
        (["probe", "--corpus", "shakespeare", "--text", "a.txt"], "not both"),
    ],
)
def test_contradictory_flags_are_refused(tmp_path, args, fragment):
    _one_line_error(CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")]), fragment)
    assert not (tmp_path / "o").exists()


def test_successful_runs_into_folders_that_look_like_markup(tmp_path, corpus):
    sim = tmp_path / "[/]x"
    result = CliRunner().invoke(app, ["simulate", "--preset", "custom", "--steps", "2", "--out", str(sim)])
    assert result.exit_code == 0, result.output
    assert f"results in {sim / 'results.json'}" in result.output.replace("\n", "")
    assert sorted(p.name for p in sim.iterdir()) == ["custom.png", "results.json"]
    run = tmp_path / "[bold]runs[/]" / "[/]y"
    result = CliRunner().invoke(app, ["train", "--out", str(run), "--corpus", str(corpus), *TINY])
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["iter"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [2]


def test_errors_naming_markup_paths_are_one_line(tmp_path):
    _one_line_error(CliRunner().invoke(app, ["simulate", "--preset", "custom", "--cloud", "a[/]b.npy",
                                             "--out", str(tmp_path / "[red]o")]), "'a[/]b.npy'")
    _one_line_error(CliRunner().invoke(app, ["train", "--out", str(tmp_path / "t"), "--corpus",
                                             str(tmp_path / "[/]missing.txt")]), "[/]missing.txt")
