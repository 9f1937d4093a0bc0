"""E4/E9's Fisher readings per layer: the full per-head eigendecomposition against the top-k solver, in one process.

Old path: ``torch.linalg.eigh`` of every head's ``(D, D)`` Fisher (float32, batched over heads), the inverse from
its eigenvalues, the cosines in each head's eigen-coordinates. New path: ``fisher_targets`` (on a CPU one float32
``eigh`` per head gives the inverse and both targets' top-5 pairs; on another device a Cholesky inverse and
``core.top_eigen``'s iterative solver for each), the cosines by ``e4_dense``. Matrices:
Wishart-like ``F_h`` with a decaying spectrum (as a real attention Fisher: a few directions dominate, a bulk
below). Prints seconds per layer of each and their ratio.

    PYTHONPATH=src python benchmarks/bench_e4_analysis.py --dims 512 1024 2048 --heads 8 --device cpu
"""

from __future__ import annotations

import argparse
import time
from functools import partial

import torch

from expattn.probes.hypotheses.e4_dense import dense_deflated
from expattn.probes.hypotheses.e4_fisher import fisher_targets
from expattn.probes.hypotheses.e4_readings import DEFLATIONS, READINGS, deflated, haar, top_form


def _fisher(heads: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """``(H, D, D)`` float32 covariances of ``2 D`` samples with a power-law spread of scales."""
    scales = torch.arange(1, dim + 1, dtype=torch.float32).pow(-0.7)
    z = torch.randn(heads, 2 * dim, dim, generator=gen) * scales
    mix = torch.linalg.qr(torch.randn(dim, dim, generator=gen)).Q
    y = z @ mix
    return y.mT @ y / y.shape[1]


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def old(fisher: torch.Tensor, rows: dict, q: torch.Tensor) -> None:
    f, vf = torch.linalg.eigh(fisher)
    ridge = 1e-2 * f.mean(-1, keepdim=True)
    spectra = {"fisher": f, "fisher_inv": ridge / (f.clamp_min(0) + ridge)}
    sets = {h: (a @ vf, b @ vf) for h, (a, b) in rows.items()}
    rotated = {h: (a, b, a @ q, b @ q) for h, (a, b) in sets.items()}
    for name in ("fisher_inv", "fisher"):
        top = top_form(spectra[name])
        deflated(rotated | {"top": (top, top, top @ q, top @ q)}, spectra, READINGS[name], (0, *DEFLATIONS), q)


def new(fisher: torch.Tensor, rows: dict, q: torch.Tensor, gen: torch.Generator) -> None:
    dense, tops, _, _ = fisher_targets(fisher, max(DEFLATIONS), gen)
    rotated = {h: (a, b, a @ q, b @ q) for h, (a, b) in rows.items()}
    for name in dense:
        x = tops[name].vectors.float()
        top = x[..., :1].mT
        dense_deflated(rotated | {"top": (top, top, top @ q, top @ q)}, dense, name, x, (0, *DEFLATIONS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    gen = torch.Generator().manual_seed(0)
    print(f"{'D':>6} {'heads':>6} {'old s':>8} {'new s':>8} {'old/new':>8}")
    for dim in args.dims:
        fisher = _fisher(args.heads, dim, gen).to(args.device)
        rows = {h: tuple(torch.randn(args.heads, args.head_dim, dim, generator=gen).to(args.device) for _ in "qk")
                for h in ("model", "random")}
        q = haar(dim, gen, args.device).float()
        times = []
        for run in (partial(old, fisher, rows, q), partial(new, fisher, rows, q, torch.Generator().manual_seed(1))):
            _sync(args.device)
            t0 = time.perf_counter()
            run()
            _sync(args.device)
            times.append(time.perf_counter() - t0)
        print(f"{dim:>6} {args.heads:>6} {times[0]:>8.2f} {times[1]:>8.2f} {times[0] / times[1]:>8.1f}")


if __name__ == "__main__":
    main()
