"""``core.top_eigen``: a whole decomposition against LOBPCG, by the matrices' side, in one process.

Dense: ``method="dense"`` (one float64 ``eigh`` of each matrix, then the top ``k`` pairs with their residuals).
Iterative: ``method="lobpcg"`` (``block = 2k + 2`` columns, tolerance ``TOL``). Matrices: ``batch`` covariances
``(n, n)`` of ``2n`` samples with a power-law spread of scales (as a layer's hidden states or a head's Fisher: a
few directions dominate, a bulk below), float64. Rounds alternate the two methods; each prints the median seconds
per batch and the ratio iterative / dense (below 1: LOBPCG is faster), then the crossover: the smallest side from
which LOBPCG is faster at every larger side measured. ``top_eigen``'s ``DENSE_SIDE`` is set from that for ``k = 1``
(E3's top share) on this project's CPU machine (benchmarks/RESULTS.md).

    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_top_eigen.py --sides 256 384 576 896 1152 1536 2048 \
        --k 1 5 --batch 4 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from expattn.core.top_eigen import top_eigen


def covariances(batch: int, side: int, gen: torch.Generator) -> torch.Tensor:
    """``(batch, side, side)`` float64 covariances of ``2 side`` samples with scales ``j^-0.7``, rotated."""
    scales = torch.arange(1, side + 1, dtype=torch.float64).pow(-0.7)
    z = torch.randn(batch, 2 * side, side, generator=gen, dtype=torch.float64) * scales
    y = z @ torch.linalg.qr(torch.randn(side, side, generator=gen, dtype=torch.float64)).Q
    return y.mT @ y / y.shape[1]


def timed(m: torch.Tensor, k: int, method: str) -> float:
    t = time.perf_counter()
    out = top_eigen(m, k, torch.Generator().manual_seed(0), method=method)
    if not bool(out.converged.all()):
        raise RuntimeError(f"{method} did not converge at side {m.shape[-1]}, k={k}")
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[256, 384, 576, 896, 1152, 1536, 2048])
    parser.add_argument("--k", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"batch {args.batch}, {args.rounds} rounds, {args.threads} thread(s); seconds per batch (median)")
    for k in args.k:
        faster = []
        for side in args.sides:
            m = covariances(args.batch, side, gen)
            times: dict[str, list[float]] = {"dense": [], "lobpcg": []}
            for _ in range(args.rounds):
                for method in times:
                    times[method].append(timed(m, k, method))
            dense, lobpcg = (statistics.median(times[x]) for x in ("dense", "lobpcg"))
            faster.append(lobpcg < dense)
            print(f"k={k} side {side:5d}: dense {dense:8.3f} s  lobpcg {lobpcg:8.3f} s  ratio {lobpcg / dense:6.2f}",
                  flush=True)
        cross = next((s for i, s in enumerate(args.sides) if all(faster[i:])), None)
        print(f"k={k}: LOBPCG faster from side {cross} on" if cross else f"k={k}: dense faster at every side")


if __name__ == "__main__":
    main()
