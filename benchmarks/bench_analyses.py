"""The probe's analyses (each hypothesis's ``measure``) on a real model, this tree against another, in rounds.

One run (``--once``): load the model, feed ``--tokens`` tokens for the hypotheses ``--only``, then time each fitted
estimator's ``measure()`` ``--repeat`` times on the same statistics (one torch thread) and print one JSON line: the
median CPU seconds per hypothesis (``time.process_time``: on one thread, what the analysis computed, nearly
independent of the other processes on the machine; the wall seconds beside them), and the forward passes' CPU
seconds as the probe counts them. The comparison (``--against SRC``): alternate runs of the other tree (``SRC``, an
``expattn`` source folder such as an unmodified checkout's ``src``) and of this one (``--this``), ``--rounds``
times each, in subprocesses of the same interpreter; print every run and the ratio this / other of the medians over
runs, in CPU seconds (below 1: this tree is faster).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_analyses.py --model smollm2 --tokens 2048 \
        --only E3,E6,E7 --against /path/to/old/src --rounds 2 --repeat 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def once(model: str, tokens: int, only: list[str], repeat: int) -> dict:
    import torch

    from expattn.probes.hypotheses import estimator
    from expattn.probes.runner import ProbeConfig, run_probe

    torch.set_num_threads(1)
    seconds: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    originals = {claim: estimator(claim).measure for claim in only}

    def timed(claim):
        def measure(self):
            for _ in range(repeat):
                t, c = time.perf_counter(), time.process_time()
                out = originals[claim](self)
                seconds.setdefault(claim, []).append(time.process_time() - c)
                wall.setdefault(claim, []).append(time.perf_counter() - t)
            return out
        return measure

    for claim in only:
        estimator(claim).measure = timed(claim)
    outcome = run_probe(ProbeConfig(model=model, tokens=tokens, hypotheses=tuple(only)), None, speedups=False)
    return {"analyses": {c: statistics.median(s) for c, s in seconds.items()},
            "wall": {c: statistics.median(s) for c, s in wall.items()},
            "forward_seconds": outcome.forward_seconds, "forward_cpu_seconds": outcome.forward_cpu_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--only", default="E3,E6,E7")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--against", type=Path, help="another tree's src folder to compare with")
    parser.add_argument("--this", type=Path, default=Path(__file__).resolve().parents[1] / "src",
                        help="this tree's src folder (a snapshot, so that edits during the run do not count)")
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    only = args.only.split(",")
    if args.once or args.against is None:
        print(json.dumps(once(args.model, args.tokens, only, args.repeat)), flush=True)
        return
    runs: dict[str, list[dict]] = {"other": [], "this": []}
    for _ in range(args.rounds):
        for name, src in (("other", args.against), ("this", args.this)):
            env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
            out = subprocess.run([sys.executable, __file__, "--once", "--model", args.model, "--tokens",
                                  str(args.tokens), "--only", args.only, "--repeat", str(args.repeat)],
                                 env=env, capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            runs[name].append(result)
            print(name, json.dumps(result), flush=True)
    for claim in only:
        other, this = (statistics.median(r["analyses"][claim] for r in runs[n]) for n in ("other", "this"))
        print(f"{claim}: other {other:.2f} CPU-s, this {this:.2f} CPU-s, ratio {this / other:.2f}")
    other, this = (statistics.median(sum(r["analyses"].values()) for r in runs[n]) for n in ("other", "this"))
    forward = statistics.median(r["forward_cpu_seconds"] for r in runs["this"] + runs["other"])
    print(f"all: other {other:.2f} CPU-s, this {this:.2f} CPU-s, ratio {this / other:.2f}; forward passes "
          f"{forward:.2f} CPU-s (the probe's own count)")


if __name__ == "__main__":
    main()
