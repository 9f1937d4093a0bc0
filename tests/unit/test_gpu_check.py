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
