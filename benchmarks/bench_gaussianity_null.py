#!/usr/bin/env python
"""Calibration of every Gaussianity decision on the null, and its power on the negative controls' clouds.

For each decision of the simulate presets, at the sizes it tests (the tested subset of at most ``MAX_TOKENS``):
- **null**: a family of true Gaussian clouds (random mean and covariance) per seed, decided by ``gaussian_family``;
  the false-rejection rate is the fraction of seeds at which any cloud is rejected, with its Clopper-Pearson 95%
  interval, against the stated family-wise rate ``FWER``. Beside it, each test's own rate at Holm's smallest level
  alpha/m (the tail that the normal approximation gets wrong for the kurtoses);
- **power**: the clouds of the negative controls (a whitened cube, lognormal and two clusters; B5's cube contrast),
  one family per seed, and the fraction of seeds at which each is rejected.

E3's Gaussian control (an effect-size rule, not a test at a level): the fraction of true Gaussian clouds at E3's
sizes that its ``close_and_far`` rule does not call close.

The Monte Carlo null of the kurtosis tests is drawn once per block of ``--block`` seeds and (tokens, dim), not once
per seed as the presets do (which would cost hours): the rate is then averaged over the blocks' null tables, and
each block's null is independent of its clouds, so every p-value in it stays valid. Drawing the tables dominates
the cost (``--block 100``: about 4 minutes per 100 seeds of B5 alone), so RESULTS.md's table uses one block.

    python benchmarks/bench_gaussianity_null.py --seeds 1000 --block 1000   # the table in RESULTS.md (~40 min)
    python benchmarks/bench_gaussianity_null.py --seeds 50 --e3-seeds 20  # a smoke run
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
from scipy.stats import beta

from expattn.dynamics import gaussianity
from expattn.dynamics.clouds import make_cloud
from expattn.dynamics.gaussianity import FWER, MAX_TOKENS, TESTS, gaussian_family
from expattn.nn.norms import NormConfig, Whitening
from expattn.probes.hypotheses.e3_shape import buffer_size, close_and_far, direction_moments, radius_ratio, spectrum

# (decision, [(tokens, dim) of each cloud]) at the sizes the presets test (full mode)
NULL_FAMILIES = {
    "B5 final clouds (D = 2, 8, 32)": [(MAX_TOKENS, d) for d in (2, 8, 32)],
    "B6 runs (16 ends, D = 2 and 8)": [(600, d) for d in (2, 8) for _ in range(8)],
    "B6 positive control (8 ends)": [(600, d) for d in (2, 8) for _ in range(4)],
}
POWER_FAMILIES = {
    "B5 cube contrast (D = 2, 8, 32)": [("cube", MAX_TOKENS, d) for d in (2, 8, 32)],
    "B6 whitening alone (D = 2, 8)": [(k, 600, d) for d in (2, 8) for k in ("gaussian", "cube", "lognormal",
                                                                            "two_clusters")],
}


def clopper_pearson(k: int, n: int) -> tuple[float, float]:
    """Two-sided 95% interval of a binomial rate ``k / n``."""
    low = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    high = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return low, high


class BlockNull:
    """``null_kurtosis`` drawn once per (tokens, dim) and block of seeds (see the module docstring)."""

    def __init__(self, draw) -> None:
        self.draw, self.tables = draw, {}

    def __call__(self, tokens: int, dim: int, draws: int, gen: torch.Generator) -> torch.Tensor:
        key = (tokens, dim, draws)
        if key not in self.tables:
            self.tables[key] = self.draw(tokens, dim, draws, gen)
        return self.tables[key]


def gaussian_cloud(tokens: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """A Gaussian cloud ``(1, tokens, dim)`` with a random mean and a random covariance of condition number 16 (a
    random 32 x 32 Gaussian matrix can square to a covariance below the rank tolerance, which the presets' clouds
    never reach)."""
    rotation = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))[0]
    mix = torch.linspace(0.5, 2.0, dim, dtype=torch.float64)[:, None] * rotation
    shift = 3 * torch.randn(dim, generator=gen, dtype=torch.float64)
    return torch.randn(1, tokens, dim, generator=gen, dtype=torch.float64) @ mix + shift


def control_cloud(kind: str, tokens: int, dim: int, gen: torch.Generator) -> torch.Tensor:
    """A whitened cloud of ``kind`` ``(1, tokens, dim)``, as the presets' negative controls start."""
    return Whitening(NormConfig(dim=dim))(make_cloud(kind, 1, tokens, dim, gen))


def run(seeds: int, block: int) -> None:
    draw = gaussianity.null_kurtosis
    print(f"Stated family-wise rate of every decision: {FWER:g}; {seeds} seeds, null tables per {block} seeds\n")
    print("| decision (true Gaussian clouds) | clouds | tests m | seeds with a false rejection | rate [95% CI] |"
          " per test at alpha/m: skewness, kurtosis, coordinate kurtosis |")
    print("|---|---:|---:|---:|---|---|")
    for name, sizes in NULL_FAMILIES.items():
        m = len(TESTS) * len(sizes)
        rejected, tail = 0, dict.fromkeys(TESTS, 0)
        start = time.perf_counter()
        for seed in range(seeds):
            if seed % block == 0:
                gaussianity.null_kurtosis = BlockNull(draw)
                print(f"  {name}: seed {seed}, {rejected} rejected so far", file=sys.stderr, flush=True)
            gen = torch.Generator().manual_seed(10_000 + seed)
            decided = gaussian_family([gaussian_cloud(t, d, gen) for t, d in sizes], gen)
            rejected += not all(ok for ok, _ in decided)
            for _, row in decided:
                for key in TESTS:
                    tail[key] += row[key] <= FWER / m
        gaussianity.null_kurtosis = draw
        low, high = clopper_pearson(rejected, seeds)
        per_test = ", ".join(f"{tail[k] / (seeds * len(sizes)):.2g}" for k in TESTS)
        print(f"| {name} | {len(sizes)} | {m} | {rejected} of {seeds} | {rejected / seeds:.4f} [{low:.4f}, "
              f"{high:.4f}] | {per_test} (alpha/m = {FWER / m:.2g}) |  <!-- {time.perf_counter() - start:.0f} s -->",
              flush=True)
    print("\n| decision (negative controls' clouds) | cloud | rejected at | rate |")
    print("|---|---|---:|---|")
    for name, clouds in POWER_FAMILIES.items():
        hits = [0] * len(clouds)
        for seed in range(seeds):
            if seed % block == 0:
                gaussianity.null_kurtosis = BlockNull(draw)
            gen = torch.Generator().manual_seed(20_000 + seed)
            decided = gaussian_family([control_cloud(k, t, d, gen) for k, t, d in clouds], gen)
            for i, (ok, _) in enumerate(decided):
                hits[i] += not ok
        gaussianity.null_kurtosis = draw
        for (kind, tokens, dim), hit in zip(clouds, hits, strict=True):
            print(f"| {name} | {kind}, T = {tokens}, D = {dim} | {hit} of {seeds} seeds | {hit / seeds:.3f} |")


def run_e3(seeds: int, dims: tuple[int, ...]) -> None:
    print("\n| E3 Gaussian control (effect-size rule) | tokens | dim | not called close | rate [95% CI] |")
    print("|---|---:|---:|---:|---|")
    for dim in dims:
        tokens, missed = buffer_size(dim), 0
        for seed in range(seeds):
            gen = torch.Generator().manual_seed(30_000 + seed)
            cloud = gaussian_cloud(tokens, dim, gen)[0] / math.sqrt(dim)
            directions = torch.randn(dim, 32, generator=gen, dtype=torch.float64)
            kurt, skew = direction_moments(cloud, directions / directions.norm(dim=0))
            rho = radius_ratio(spectrum(cloud))
            close, _ = close_and_far(*(torch.tensor([v], dtype=torch.float64) for v in (kurt, skew, rho, kurt)))
            missed += not bool(close[0])
        low, high = clopper_pearson(missed, seeds)
        print(f"| E3 | {tokens} | {dim} | {missed} of {seeds} | {missed / seeds:.4f} [{low:.4f}, {high:.4f}] |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--block", type=int, default=50, help="seeds per Monte Carlo null table")
    parser.add_argument("--e3-seeds", type=int, default=200)
    parser.add_argument("--e3-dims", type=int, nargs="+", default=[384, 576, 640])
    args = parser.parse_args()
    torch.set_num_threads(1)
    run(args.seeds, args.block)
    run_e3(args.e3_seeds, tuple(args.e3_dims))


if __name__ == "__main__":
    main()
