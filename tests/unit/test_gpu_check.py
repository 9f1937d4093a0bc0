"""The prepared GPU check cannot rot: its ``--smoke`` mode (tiny sizes, the CPU) runs every part but the pytest one
(the probe on a random Llama, ``benchmarks/bench_gpu.py --smoke``, training killed and resumed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_gpu_check_smoke(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), str(tmp_path), "--smoke"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"probe", "8b", "profile", "bench", "train"}, summary
    assert all(v["ok"] for v in summary.values()), summary
    assert all(set(row["verdicts"]) >= {"E1", "E5", "E9"} for row in summary["8b"]["sizes"].values()), summary
    for name in ("profile_probe.txt", "profile_empirical.txt"):  # the busiest operations, with their source lines
        assert "self_cpu_time_total" in (text := (tmp_path / name).read_text()) and "expattn" in text, name
    assert summary["train"]["bitwise"]  # on the CPU, in float32, the resumed run replays the uninterrupted one
    assert "train step LM vs nanoGPT" in (tmp_path / "gpu_check.log").read_text()


def test_an_8b_size_that_cannot_finish_in_the_budget_is_not_started():
    """The 8b part runs in the check's own process, where the budget cannot kill it: on an H200 its 262,144-token
    size outran the device call's limit. The first size's time decides whether the next is started; the negative
    control is the same run with time to spare, which starts both."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check_8b import needed_seconds, run

    row = {"probe_seconds": 166.7, "analysis_seconds": 153.7}  # the H200's 16,384 tokens (2026-11-28)
    assert needed_seconds(row, 1024, 64) == pytest.approx(153.7 + 3 * 13.0 * 16)  # 777.7 s: more than a call holds
    lines: list[str] = []
    short = run(lambda *a: lines.append(" ".join(map(str, a))), True, torch.device("cpu"), "cpu", left=lambda: 0.0)
    assert list(short["sizes"]) == [8 * 32] and short["not_started"] == [16 * 32], short
    assert any("not started" in line for line in lines)
    spare = run(lambda *a: None, True, torch.device("cpu"), "cpu")
    assert list(spare["sizes"]) == [8 * 32, 16 * 32] and spare["not_started"] == []


def test_the_8b_part_probes_under_its_memory_budget():
    """The 8b part passes its memory budget to the probe and logs it: under a budget far below what the tiny model's
    statistics take, the probe plans several passes; with the free memory (None), one."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check_8b import MEMORY_BUDGET, run

    assert MEMORY_BUDGET == "57GiB"  # 72 GiB in all (the goal's peak) less the 8B shape's 15 GiB of weights
    lines: list[str] = []
    tight = run(lambda *a: lines.append(" ".join(map(str, a))), True, torch.device("cpu"), "cpu",
                memory_budget="3MiB")
    assert "memory budget beside them 3MiB" in lines[0]
    free = run(lambda *a: None, True, torch.device("cpu"), "cpu", memory_budget=None)
    assert all(len(row["passes"]) > 1 for row in tight["sizes"].values()), tight
    assert all(len(row["passes"]) == 1 for row in free["sizes"].values()), free
