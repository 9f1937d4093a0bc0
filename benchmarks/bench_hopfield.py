"""Hopfield retrieval time against a plain-torch reference of the same update, same process.

    OMP_NUM_THREADS=1 python benchmarks/bench_hopfield.py [--patterns 2048 --dim 64 --queries 256 --rounds 60]

Reference: ``xi = softmax(beta * xi @ X.T) @ X`` repeated ``steps`` times. Ours: ``Hopfield``
(no projection, ``update_steps_max=steps``) via ``forward`` (no energy) and via ``retrieve``
(with the energy trace, one extra log-sum-exp per step). Forward only, under ``no_grad``. A
second copy of the reference is timed as an A/A control: its ratio shows what the method reads
when there is no difference. Each round times every variant (``--calls`` calls each) in an order
that rotates; the ratio is the median of per-round ratios to the reference, with a bootstrap
interval, beside the best-rounds ratio.

The allocator matters at these sizes: glibc returns the freed 2 MiB logits to the system and
the next call faults the pages in again. ``--malloc`` runs the timing in a subprocess per setting:
``faults`` is glibc's default; ``no-faults`` sets ``MALLOC_MMAP_THRESHOLD_`` (16 MiB: the buffers
come from the heap) and ``MALLOC_TOP_PAD_`` (256 MiB: the heap is not trimmed), so no call faults.
Minor page faults per call (median over rounds) are printed for each setting. Goal: <= 1.05x in both.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

from expattn.nn.hopfield import Hopfield, HopfieldConfig

NO_FAULTS = {"MALLOC_MMAP_THRESHOLD_": str(16 << 20), "MALLOC_TOP_PAD_": str(256 << 20)}


def reference(xi: torch.Tensor, patterns: torch.Tensor, beta: float, steps: int) -> torch.Tensor:
    for _ in range(steps):
        xi = torch.softmax(beta * xi @ patterns.mT, dim=-1) @ patterns
    return xi


def clock(fn: Callable[[], torch.Tensor], calls: int, timer: Callable[[], float]) -> tuple[float, int]:
    """Seconds per call and minor page faults per call over ``calls`` calls."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = timer()
    for _ in range(calls):
        fn()
    seconds = (timer() - start) / calls
    return seconds, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) // calls


def median_interval(ratios: np.ndarray) -> tuple[float, float, float]:
    boot = np.median(np.random.default_rng(0).choice(ratios, (2000, len(ratios))), axis=1)
    lo, hi = np.quantile(boot, [0.025, 0.975])
    return float(np.median(ratios)), float(lo), float(hi)


def time_all(args: argparse.Namespace) -> None:
    timer = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    patterns = torch.randn(args.batch, args.patterns, args.dim, generator=gen)
    xi = patterns[:, : args.queries] + 0.5 * torch.randn(args.batch, args.queries, args.dim, generator=gen)
    setting = "no-faults" if os.environ.get("MALLOC_TOP_PAD_") else "faults (glibc default)"
    print(f"malloc: {setting}; patterns={args.patterns} dim={args.dim} queries={args.queries} batch={args.batch} "
          f"beta={args.beta} threads={torch.get_num_threads()} clock={args.clock} torch {torch.__version__}, "
          f"{args.rounds} rounds x {args.calls} calls")
    header = ("steps", "variant", "best ms", "faults", "best", "median ratio (95% interval)")
    print("{:>5s} {:28s} {:>8s} {:>6s} {:>6s} {:>28s}".format(*header))
    for steps in (1, 3):
        layer = Hopfield(HopfieldConfig(input_size=args.dim, beta=args.beta, update_steps_max=steps))
        variants = {
            "plain torch": lambda s=steps: reference(xi, patterns, args.beta, s),
            "A/A control (plain torch)": lambda s=steps: reference(xi, patterns, args.beta, s),
            "Hopfield.forward": lambda layer=layer: layer(xi, patterns),
            "Hopfield.retrieve (energy)": lambda layer=layer: layer.retrieve(xi, patterns).output,
        }
        names = list(variants)
        times: dict[str, list[float]] = {k: [] for k in names}
        faults: dict[str, list[int]] = {k: [] for k in names}
        with torch.no_grad():
            torch.testing.assert_close(variants["Hopfield.forward"](), variants["plain torch"](), rtol=0, atol=0)
            for name in names:  # warm-up
                clock(variants[name], args.calls, timer)
            for r in range(args.rounds):
                for name in names[r % len(names):] + names[: r % len(names)]:
                    seconds, faulted = clock(variants[name], args.calls, timer)
                    times[name].append(seconds)
                    faults[name].append(faulted)
        ref = np.array(times["plain torch"])
        for name in names:
            t = np.array(times[name])
            mid, lo, hi = median_interval(t / ref)
            fault = int(np.median(faults[name]))
            print(f"{steps:5d} {name:28s} {1e3 * t.min():8.3f} {fault:6d} {t.min() / ref.min():6.3f} "
                  f"{mid:13.3f} ({lo:.3f}-{hi:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", type=int, default=2048)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--beta", type=float, default=0.125)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--calls", type=int, default=10, help="calls per variant and round")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: process CPU time (robust on a shared machine); wall: elapsed time")
    parser.add_argument("--malloc", choices=("both", "faults", "no-faults", "inherit"), default="both",
                        help="allocator setting(s), each timed in its own subprocess; inherit: this process as is")
    args = parser.parse_args()
    if args.malloc == "inherit":
        time_all(args)
        return
    for setting in ("faults", "no-faults") if args.malloc == "both" else (args.malloc,):
        env = {k: v for k, v in os.environ.items() if k not in NO_FAULTS}
        env.update(NO_FAULTS if setting == "no-faults" else {})
        argv = [f"--{k}={v}" for k, v in vars(args).items() if k != "malloc"]
        subprocess.run([sys.executable, __file__, *argv, "--malloc=inherit"], env=env, check=True)


if __name__ == "__main__":
    main()
