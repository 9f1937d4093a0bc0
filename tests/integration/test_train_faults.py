"""Fault injection: training killed (SIGKILL) at each write point resumes to the uninterrupted losses and
leaves no stray files; two writers of one run folder give one run and one clean error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from expattn.cli import app
from expattn.results.lock import LOCK, hold_output
from expattn.train.checkpoint import read_checkpoint

ITERS = 6
ARGS = ["--layers", "1", "--dim", "8", "--heads", "2", "--context", "8", "--batch", "4", "--iters", str(ITERS),
        "--eval-every", "1", "--ckpt-every", "2", "--seed", "3", "--no-progress", "--device", "cpu"]
FINAL = {"checkpoint.safetensors", "metrics.jsonl", "config.json", "model"}

# Runs the CLI in a child that SIGKILLs itself at its n-th passage through one write point:
#   save: entering save_checkpoint (nothing of that checkpoint written yet);
#   checkpoint: the checkpoint's temporary file is written, its rename not done;
#   export: a model export is staged, the old model/ not yet moved aside;
#   swap: the old model/ moved aside (or absent), the new one not yet renamed into place.
KILLER = """
import os, signal, sys
from pathlib import Path
import expattn.train.loop as loop
point, nth = sys.argv[1], int(sys.argv[2])
seen = [0]
def hit():
    seen[0] += 1
    if seen[0] == nth:
        os.kill(os.getpid(), signal.SIGKILL)
if point == "save":
    real_save = loop.save_checkpoint
    def save(*args, **kwargs):
        hit()
        return real_save(*args, **kwargs)
    loop.save_checkpoint = save
else:
    real_replace = os.replace
    def replace(src, dst, **kwargs):
        src, dst = Path(src), Path(dst)
        if ((point == "checkpoint" and src.name.startswith(".checkpoint.safetensors."))
                or (point == "export" and dst.parent.name.startswith(".model.old-"))
                or (point == "swap" and src.name.startswith(".model.tmp-"))):
            hit()
        return real_replace(src, dst, **kwargs)
    os.replace = replace
from expattn.cli import app
sys.argv = ["expattn", *sys.argv[3:]]
app(prog_name="expattn")
"""


@pytest.fixture
def one_thread():
    """In-process runs on one thread, like the killed child (OMP_NUM_THREADS=1): the same float sums."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def corpus(gen, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join("abcdefgh ,.\n"[i] for i in torch.randint(0, 12, (3000,), generator=gen).tolist()))
    return path


def _train(out: Path, corpus: Path, *extra: str):
    return CliRunner().invoke(app, ["train", "--out", str(out), "--corpus", str(corpus), *ARGS, *extra])


def _losses(out: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["iter"], r["train_loss"], r["val_loss"], r["step_loss"], r["lr"]) for r in rows]


def _killed_child(out: Path, corpus: Path, point: str, nth: int, *extra: str) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    child = subprocess.run([sys.executable, "-c", KILLER, point, str(nth), "train", "--out", str(out),
                            "--corpus", str(corpus), *ARGS, *extra], env=env, capture_output=True, timeout=120)
    assert child.returncode == -9, child.stderr.decode()[-2000:]


@pytest.mark.slow
def test_kills_at_every_write_point_then_resume_to_the_uninterrupted_run(tmp_path, corpus, one_thread):
    """One run killed four times in a row, each resume killed at the next write point, then resumed to the end.

    Checkpoints at steps 2, 4, 6; each resume exports the checkpoint's model first.
    """
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert _train(whole, corpus).exit_code == 0
    chain = [
        ("save", 1, None, ()),  # before the first checkpoint: evaluations 1-2 logged, nothing to resume from
        ("checkpoint", 2, ".checkpoint.safetensors.", ("--resume",)),  # inside the write of step 4's checkpoint
        ("export", 2, ".model.tmp-", ("--resume",)),  # step 4's export staged, the old model/ still in place
        ("swap", 2, ".model.old-", ("--resume",)),  # step 6's export: old model/ moved aside, new one not in place
    ]
    for point, nth, left_over, extra in chain:
        _killed_child(killed, corpus, point, nth, *extra)
        if left_over is not None:
            assert any(p.name.startswith(left_over) for p in killed.iterdir()), (point, sorted(os.listdir(killed)))
    assert not (killed / "model").exists()  # the last kill left the run without its model folder
    resumed = _train(killed, corpus, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert _losses(killed) == _losses(whole)  # bit-identical, not merely close
    assert {p.name for p in killed.iterdir()} == FINAL  # no temporary file survives
    assert sorted(os.listdir(killed / "model")) == ["config.json", "model.safetensors"]
    assert (killed / "model/model.safetensors").read_bytes() == (whole / "model/model.safetensors").read_bytes()
    a, b = read_checkpoint(killed / "checkpoint.safetensors"), read_checkpoint(whole / "checkpoint.safetensors")
    assert a.step == b.step == ITERS
    for part in ("model", "rng"):
        assert getattr(a, part).keys() == getattr(b, part).keys()
        assert all(torch.equal(getattr(a, part)[k], getattr(b, part)[k]) for k in getattr(a, part))
    assert all(torch.equal(v, b.optim["state"][i][k]) for i, e in a.optim["state"].items() for k, v in e.items())


def test_resume_without_a_checkpoint_starts_at_step_zero(tmp_path, corpus, one_thread):
    whole, fresh = tmp_path / "whole", tmp_path / "fresh"
    assert _train(whole, corpus).exit_code == 0
    result = _train(fresh, corpus, "--resume")
    assert result.exit_code == 0 and "starting from step 0" in result.output, result.output
    assert _losses(fresh) == _losses(whole)


def test_second_writer_gets_one_line_error_while_the_lock_is_held(tmp_path, corpus):
    out = tmp_path / "run"
    with hold_output(out):  # another writer, as far as the kernel is concerned (its own open file)
        for extra in ((), ("--resume",)):
            result = _train(out, corpus, *extra)
            lines = [line for line in result.output.splitlines() if line.strip()]
            assert result.exit_code == 2 and len(lines) == 1, result.output
            assert lines[0].startswith("error:") and "being written by another process" in lines[0]
        assert sorted(os.listdir(out)) == [LOCK]  # the refused writers wrote nothing
    assert not out.exists()  # the holder made the folder and published nothing: removed with its lock
    assert _train(out, corpus).exit_code == 0  # released on exit: the next writer proceeds


@pytest.mark.slow
def test_two_concurrent_writers_give_one_run_and_one_clean_error(tmp_path, corpus):
    out = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "expattn.cli", "train", "--out", str(out), "--corpus", str(corpus), *ARGS]
    procs = [subprocess.Popen([*cmd, "--seed", str(seed)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for seed in (1, 2)]
    results = [(p.wait(timeout=120), p.stderr.read().decode()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    error = next(err for code, err in results if code == 2)
    lines = [line for line in error.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), error
    assert "being written by another process" in lines[0] or "already holds a run" in lines[0]
    iters = [json.loads(line)["iter"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert iters == list(range(1, ITERS + 1))  # one run's evaluations, none twice


def test_resume_compares_settings_not_the_spelling_of_the_folder(tmp_path, corpus, monkeypatch, one_thread):
    first, moved = tmp_path / "first", tmp_path / "moved"
    assert _train(first, corpus, "--iters", "4").exit_code == 0
    first.rename(moved)
    monkeypatch.chdir(tmp_path)  # relative spellings of the same folder and corpus
    result = _train(Path("moved"), Path(corpus.name), "--iters", "4", "--resume")
    assert result.exit_code == 0, result.output
    assert [r[0] for r in _losses(moved)] == [1, 2, 3, 4]
    different = _train(Path("moved"), Path(corpus.name), "--iters", "4", "--lr", "0.5", "--resume")
    assert different.exit_code == 2 and "these differ from the checkpoint: lr" in different.output


@pytest.mark.parametrize("bad", ["{}", "[1, 2]", '{"iter": "3"}'])
def test_a_metrics_line_that_is_not_an_evaluation_is_a_one_line_error(tmp_path, corpus, bad):
    out = tmp_path / "run"
    assert _train(out, corpus).exit_code == 0
    lines = (out / "metrics.jsonl").read_text().splitlines()
    (out / "metrics.jsonl").write_text("\n".join([*lines[:2], bad, *lines[2:]]) + "\n")
    result = _train(out, corpus, "--resume")
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert "line 3 is not an evaluation" in result.output
