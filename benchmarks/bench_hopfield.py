"""Hopfield retrieval time against a plain-torch reference of the same update, same run.

    python benchmarks/bench_hopfield.py [--patterns 2048 --dim 64 --queries 256 --repeats 200]

Reference: ``xi = softmax(beta * xi @ X.T) @ X`` repeated ``steps`` times. Ours: ``Hopfield``
(no projection, ``update_steps_max=steps``) via ``forward`` (no energy) and via ``retrieve``
(with the energy trace, one extra log-sum-exp per step). Forward only, under ``no_grad``.
Each timing is the minimum over ``repeats`` interleaved rounds. Goal (issue 3): <= 1.10x.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from expattn.nn.hopfield import Hopfield, HopfieldConfig


def reference(xi: torch.Tensor, patterns: torch.Tensor, beta: float, steps: int) -> torch.Tensor:
    for _ in range(steps):
        xi = torch.softmax(beta * xi @ patterns.mT, dim=-1) @ patterns
    return xi


def clock(fn: Callable[[], torch.Tensor], timer: Callable[[], float]) -> float:
    start = timer()
    fn()
    return timer() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", type=int, default=2048)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--queries", type=int, default=256)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--beta", type=float, default=0.125)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                        help="cpu: process CPU time (robust on a shared machine); wall: elapsed time")
    args = parser.parse_args()
    # CPU time of the process ignores the time it spends preempted on a shared machine.
    timer = time.process_time if args.clock == "cpu" else time.perf_counter
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    patterns = torch.randn(args.batch, args.patterns, args.dim, generator=gen)
    xi = patterns[:, : args.queries] + 0.5 * torch.randn(args.batch, args.queries, args.dim, generator=gen)
    print(f"patterns={args.patterns} dim={args.dim} queries={args.queries} batch={args.batch} beta={args.beta} "
          f"threads={torch.get_num_threads()}, clock={args.clock}, torch {torch.__version__}, min of {args.repeats}")
    print(f"{'steps':>5s} {'variant':28s} {'ms':>8s} {'ratio':>7s}")
    for steps in (1, 3):
        layer = Hopfield(HopfieldConfig(input_size=args.dim, beta=args.beta, update_steps_max=steps))
        variants = {
            "plain torch": lambda s=steps: reference(xi, patterns, args.beta, s),
            "Hopfield.forward": lambda layer=layer: layer(xi, patterns),
            "Hopfield.retrieve (energy)": lambda layer=layer: layer.retrieve(xi, patterns).output,
        }
        with torch.no_grad():
            torch.testing.assert_close(variants["Hopfield.forward"](), variants["plain torch"]())
            best = dict.fromkeys(variants, float("inf"))
            for _ in range(args.repeats):
                for name, fn in variants.items():
                    best[name] = min(best[name], clock(fn, timer))
        for name, t in best.items():
            print(f"{steps:5d} {name:28s} {1e3 * t:8.3f} {t / best['plain torch']:7.3f}")


if __name__ == "__main__":
    main()
