"""E6's cross-validated ridge fits at a given width, on synthetic statistics: CPU seconds per layer.

Builds ``--layers`` layers of ``FOLDS`` fold statistics (``CrossMoments`` of ``--tokens`` tokens per fold, width
``--dim``, inputs with a spread of scales, an update partly linear in them and a noise control) and times E6's
analysis of them (``E6Mlp._fits``) on one thread, ``--rounds`` times, printing the median CPU seconds per layer.
Runs against whichever ``expattn`` is on ``PYTHONPATH``: before the fits were batched, ``_fits`` took one layer
index (float64, one fit at a time); now it takes a range of layers. Compare two trees by running it with each:

    OMP_NUM_THREADS=1 PYTHONPATH=OLD/src python benchmarks/bench_e6_fits.py --dim 1536
    OMP_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_e6_fits.py --dim 1536
"""

from __future__ import annotations

import argparse
import statistics
import time
from types import SimpleNamespace

import torch

from expattn.probes.hypotheses.e6_mlp import FOLDS, E6Mlp
from expattn.probes.hypotheses.regression import CrossMoments


def estimator(dim: int, layers: int, tokens: int) -> E6Mlp:
    """An E6 whose ``folds_`` hold synthetic statistics (see module docstring)."""
    gen = torch.Generator().manual_seed(0)
    e6 = E6Mlp.__new__(E6Mlp)
    e6.ctx = SimpleNamespace(dim=dim, layers=layers)
    e6._pair = (dim, 2 * dim, torch.float64)  # read by the unbatched fits of the trees before
    scales = torch.logspace(-2, 0.5, dim)
    e6.folds_ = []
    for _ in range(layers):
        w = torch.randn(dim, dim, generator=gen) / dim**0.5
        folds = []
        for _ in range(FOLDS):
            x = torch.randn(tokens, dim, generator=gen) * scales
            y = torch.cat([x @ w + torch.randn(tokens, dim, generator=gen), torch.randn(tokens, dim, generator=gen)], 1)
            folds.append(CrossMoments(dim, 2 * dim).update(x, y))
        e6.folds_.append(folds)
    return e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dim", type=int, default=576)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    e6 = estimator(args.dim, args.layers, args.tokens)
    batched = "layers" in E6Mlp._fits.__code__.co_varnames[:2]
    seconds = []
    for _ in range(args.rounds):
        start = time.process_time()
        for i in range(args.layers):
            e6._fits(range(i, i + 1) if batched else i)
        seconds.append((time.process_time() - start) / args.layers)
    kind = "batched" if batched else "one fit at a time"
    print(f"width {args.dim}: {statistics.median(seconds):.2f} CPU-s per layer ({kind})")


if __name__ == "__main__":
    main()
