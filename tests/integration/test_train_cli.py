"""`expattn train`: a tiny run end to end, and one-line errors (exit 2) for bad input."""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from expattn.cli import app
from expattn.nn.lm import LMConfig

TINY = ["--layers", "1", "--dim", "8", "--heads", "2", "--context", "8", "--batch", "4", "--iters", "6",
        "--eval-every", "3", "--ckpt-every", "3", "--no-progress", "--device", "cpu"]


@pytest.fixture
def corpus(gen, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join("abcdef \n"[i] for i in torch.randint(0, 8, (3000,), generator=gen).tolist()))
    return path


def _run(*args):
    return CliRunner().invoke(app, ["train", *map(str, args)])


def _one_line_error(result, fragment):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_tiny_run_writes_metrics(corpus, tmp_path):
    out = tmp_path / "run"
    result = _run("--out", out, "--corpus", corpus, *TINY)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows] == [3, 6]
    assert all({"iter", "train_loss", "val_loss", "tokens_per_s"} <= set(r) for r in rows)
    assert all(r["tokens_per_s"] > 0 and 0 < r["val_loss"] < 10 for r in rows)
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["vocab_size"] == 8 and config["train"]["iters"] == 6


def test_bias_free_contiguous_run_records_its_options(corpus, tmp_path):
    out = tmp_path / "run"
    result = _run("--out", out, "--corpus", corpus, *TINY, "--no-bias", "--split", "contiguous")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "config.json").read_text())
    assert config["model"]["bias"] is False and config["train"]["split"] == "contiguous"
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY, "--split", "contiguous", "--resume"), "model")
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY, "--no-bias", "--resume"), "split")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--norm", "batchnorm"], "norm must be one of"),
        (["--carrier", "kernel"], "carrier must be one of"),
        (["--context", "400"], "context must lie in"),
        (["--heads", "3"], "heads must divide dim"),
        (["--iters", "0"], "iters"),
        (["--split", "random"], "split must be one of per-text, contiguous"),
    ],
)
def test_bad_options(corpus, tmp_path, args, fragment):
    out = tmp_path / "run"
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY, *args), fragment)
    assert not out.exists()  # nothing written for a rejected command


def test_missing_corpus(tmp_path):
    _one_line_error(_run("--out", tmp_path / "run", "--corpus", tmp_path / "nope.txt", *TINY), "not found")


def test_resume_errors(corpus, tmp_path):
    out = tmp_path / "run"
    fresh = _run("--out", out, "--corpus", corpus, *TINY, "--resume")  # nothing to resume: starts at step 0
    assert fresh.exit_code == 0 and "starting from step 0" in fresh.output, fresh.output
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY), "already holds a run")
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY, "--lr", "0.5", "--resume"), "lr")
    ckpt = out / "checkpoint.safetensors"
    data = bytearray(ckpt.read_bytes())
    data[-3] ^= 0xFF
    ckpt.write_bytes(bytes(data))
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY, "--resume"), "corrupt")
    ckpt.write_bytes(bytes(data[:100]))
    _one_line_error(_run("--out", out, "--corpus", corpus, *TINY, "--resume"), "checkpoint")


def test_unknown_sweep(corpus, tmp_path):
    _one_line_error(_run("--out", tmp_path / "s", "--corpus", corpus, *TINY, "--sweep", "widths"), "sweep must be")


def test_divergence_stops_with_one_line(corpus, tmp_path):
    """A learning rate of 1e30 turns the loss non-finite within a few steps: the trainer's check of every
    step's loss (read at the next evaluation or checkpoint; the LM's norms skip theirs) stops the run with a
    one-line error naming the step, before anything trained on NaN is written."""
    _one_line_error(_run("--out", tmp_path / "run", "--corpus", corpus, *TINY, "--lr", "1e30"), "training diverged")


def test_checkpoint_written_before_split_and_bias_existed_still_resumes(tmp_path):
    """Settings added later are compared with their defaults, which is what such a run used."""
    from expattn.train.loop import TrainConfig, _check_resume

    cfg = TrainConfig(out=tmp_path)
    old = cfg.to_json()
    del old["split"], old["model"]["bias"]
    _check_resume(cfg, old)  # no error
    with pytest.raises(ValueError, match="differ from the checkpoint: model, split"):
        _check_resume(TrainConfig(out=tmp_path, split="contiguous", model=LMConfig(bias=False)), old)
