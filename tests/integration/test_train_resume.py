"""Exact resume: a run killed with SIGKILL and resumed logs the losses of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from expattn.train.checkpoint import read_checkpoint

ITERS = 60


def _args(out, corpus, extra):
    return [sys.executable, "-m", "expattn.cli", "train", "--out", str(out), "--corpus", str(corpus),
            "--layers", "2", "--dim", "16", "--heads", "2", "--context", "16", "--batch", "4",
            "--iters", str(ITERS), "--eval-every", "10", "--ckpt-every", "10", "--seed", "5", "--no-progress",
            "--device", "cpu", "--carrier", "gaussian_mixture", *extra]


def _losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [(r["iter"], r["train_loss"], r["val_loss"], r["step_loss"], r["lr"]) for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize("extra", [[], ["--grad-accum", "2"], ["--dtype", "float16"]], ids=["plain", "accum", "fp16"])
def test_kill_and_resume_replays_the_uninterrupted_losses(gen, tmp_path, extra):
    """Also with gradient accumulation, and with float16 autocast, whose loss scale the checkpoint keeps."""
    text = "".join("abcdefgh ,.\n"[i] for i in torch.randint(0, 12, (20000,), generator=gen).tolist())
    corpus = tmp_path / "text.txt"
    corpus.write_text(text)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # same thread count in every run: same float sums
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    subprocess.run(_args(whole, corpus, extra), check=True, env=env, capture_output=True, timeout=300)

    proc = subprocess.Popen(_args(killed, corpus, extra), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = killed / "checkpoint.safetensors"
    deadline = time.monotonic() + 240
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    step = read_checkpoint(ckpt).step
    assert 10 <= step < ITERS  # killed mid-run, after at least one checkpoint

    resumed = subprocess.run([*_args(killed, corpus, extra), "--resume"], env=env, capture_output=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert len(_losses(whole)) == ITERS // 10
    assert _losses(killed) == _losses(whole)  # bit-identical, not merely close
