#!/usr/bin/env python
"""The main job's verdicts at several seeds: runs ``expattn report --seed S`` (the README's command, one output
folder per seed; or ``expattn simulate`` with ``--command simulate``), then prints which records and controls keep
their verdict (``expattn.results.stability``).

    python benchmarks/verdict_stability.py --out /tmp/stability --seeds 0 1 2 3 4        # full mode
    python benchmarks/verdict_stability.py --out /tmp/stability --seeds 0 1 2 --quick    # what CI runs
    python benchmarks/verdict_stability.py --command simulate --out /tmp/sim --seeds $(seq 0 19)

Exits 1 when a report exits non-zero or a verdict differs between seeds. Existing seed folders with a
``results.json`` are read instead of re-run (``--rerun`` to run them again).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

from expattn.results.record import load_records
from expattn.results.stability import markdown as stability_markdown
from expattn.results.stability import verdict_rows


def report(out: Path, seed: int, quick: bool, job: str = "report") -> tuple[int, float]:
    """Run ``expattn job`` (report or simulate) at ``seed`` into ``out``; its exit code and wall seconds."""
    expattn = shutil.which("expattn", path=str(Path(sys.executable).parent)) or "expattn"
    command = [expattn, job, "--out", str(out), "--overwrite", "--seed", str(seed)]
    command += ["--quick"] if quick else []
    start = time.perf_counter()
    code = subprocess.run(command, stdout=subprocess.DEVNULL, check=False).returncode
    return code, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for one report per seed")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--quick", action="store_true", help="expattn report --quick")
    parser.add_argument("--command", choices=("report", "simulate"), default="report", help="the job to run")
    parser.add_argument("--rerun", action="store_true", help="run seeds whose results.json exists again")
    args = parser.parse_args()
    runs, codes = {}, {}
    for seed in args.seeds:
        folder = args.out / f"seed-{seed}"
        if args.rerun or not (folder / "results.json").exists():
            codes[seed], seconds = report(folder, seed, args.quick, args.command)
            print(f"seed {seed}: exit {codes[seed]} in {seconds:.0f} s", flush=True)
        runs[seed] = load_records(folder / "results.json")
    rows = verdict_rows(runs)
    for seed, records in runs.items():
        counts: dict[str, int] = {}
        for r in records:
            counts[r.verdict] = counts.get(r.verdict, 0) + 1
        print(f"seed {seed}: " + ", ".join(f"{n} {v}" for v, n in sorted(counts.items())))
    print(stability_markdown(rows, args.seeds))
    return 0 if all(c == 0 for c in codes.values()) and all(r.stable for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
