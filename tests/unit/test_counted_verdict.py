"""A verdict that counts layers counts them with an interval: a majority that another sample of sequences could
tip is inconclusive, one far from half the layers is decided (through the probe's own bootstrap and rule)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from expattn.probes.hypotheses.base import Measured, count_interval, majority_verdict, replicate_intervals
from expattn.probes.hypotheses.e3_gaussianity import E3Gaussianity
from expattn.probes.hypotheses.e6_mlp import E6Mlp
from expattn.probes.hypotheses.readings import contraction_verdict, growth_verdict
from expattn.probes.statistics.stats import BootstrapMeans, poisson_weights

SEQUENCES, REPLICATES = 400, 200


def planted(margins: list[float], seed: int) -> tuple[np.ndarray, ...]:
    """Per-sequence values of one ratio per layer whose sample mean is exactly ``1 + m * se`` (``m`` in
    ``margins``, ``se`` its standard error), through ``BootstrapMeans``: the estimate, its 95% interval and the
    per-replicate intervals (``replicate_intervals``), each ``(layers,)`` or ``(R, layers)``."""
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(SEQUENCES, len(margins), generator=gen, dtype=torch.float64)
    noise = (noise - noise.mean(0)) / noise.std(0)  # exactly mean 0, sd 1: the standard error is 1/sqrt(n)
    se = 1 / SEQUENCES**0.5
    values = 1 + torch.tensor(margins, dtype=torch.float64) * se + noise
    boot = BootstrapMeans(len(margins), REPLICATES).update(values, poisson_weights(seed, torch.arange(SEQUENCES),
                                                                                    REPLICATES))
    est, lo, hi = (t.numpy() for t in boot.interval(lambda m: m))
    return (est, lo, hi, *replicate_intervals(est, lo, hi, boot.replicates(lambda m: m).numpy()))


def test_a_majority_near_half_the_layers_is_inconclusive():
    # 10 of 18 layers with the ratio 2.6 standard errors above 1: each interval (+-1.96 se) clears 1 by 0.64 se,
    # 8 layers 6 se below 1. Every layer is significant: the old count says 10 > 9, supported. Each replicate's
    # interval clears 1 when its estimate is above 1 + 1.96 se, about 74% of replicates per layer, so the count
    # of expanding layers spreads over about 7.4 +- 1.4 and its interval reaches 9 and below.
    _, lo, hi, lo_r, hi_r = planted([2.6] * 10 + [-6.0] * 8, seed=1)
    assert ((lo > 1).sum(), (hi < 1).sum()) == (10, 8)
    assert growth_verdict(lo, hi) == "supported"  # the old rule
    low, high = count_interval(lo_r > 1)
    assert low <= 9 <= high
    assert growth_verdict(lo, hi, None, (lo_r, hi_r)) == "inconclusive"


def test_a_majority_far_from_half_the_layers_is_decided():
    # 14 of 18 layers 10 se above 1, 4 layers 10 se below: no replicate moves a layer across 1 (8 se of room
    # for a replicate's deviation of about 1 se), so the count is 14 in every replicate
    _, lo, hi, lo_r, hi_r = planted([10.0] * 14 + [-10.0] * 4, seed=2)
    assert count_interval(lo_r > 1) == (14.0, 14.0)
    assert growth_verdict(lo, hi, None, (lo_r, hi_r)) == "supported"
    # the negative control through the same rule: the same layers asked whether they contract
    assert contraction_verdict(lo, hi, (lo_r, hi_r)) == "not_supported"
    _, lo, hi, lo_r, hi_r = planted([-10.0] * 14 + [10.0] * 4, seed=3)
    assert growth_verdict(lo, hi, None, (lo_r, hi_r)) == "not_supported"
    assert contraction_verdict(lo, hi, (lo_r, hi_r)) == "supported"


@pytest.mark.parametrize(("low_count", "expected"), [(9, "inconclusive"), (10, "supported")])
def test_the_count_interval_against_half(low_count, expected):
    # 18 units, 10 significant above; of 40 replicates, 10 count ``low_count`` units above and 30 count 10: the
    # 2.5% quantile of the counts is ``low_count``, and a majority is decided only when it stays above 9 = n/2
    above = np.arange(18) < 10
    reps = np.stack([np.arange(18) < (low_count if r < 10 else 10) for r in range(40)])
    assert count_interval(reps)[0] == low_count
    assert majority_verdict(above, ~above, reps, ~reps) == expected
    assert majority_verdict(above, ~above) == "supported"  # without replicates: the old count


def _e6(rho: tuple[np.ndarray, ...]):
    """E6's judgement of per-layer update ratios ``rho`` = (estimate, low, high, low per replicate, high per
    replicate), the same in both token variants, no layer linear (held-out R^2 0)."""
    est, lo, hi, lo_r, hi_r = (np.stack([a, a], axis=-1) for a in rho)  # (..., layers, variant)
    layers = est.shape[0]
    arrays = {"est": est, "lo": lo, "hi": hi, "lo_rep": lo_r, "hi_rep": hi_r, "r2": np.zeros((layers, 5)),
              "r2_control": np.zeros(layers)}
    return E6Mlp.__new__(E6Mlp).judge(Measured(arrays, {}, {}))


def _scaled(planted_values: tuple[np.ndarray, ...], factor: float) -> tuple[np.ndarray, ...]:
    return tuple(a * factor for a in planted_values)


def test_e6_counts_its_identity_layers_with_an_interval():
    # rho = 0.1 (1 + m se): 10 of 18 layers with their interval just below E6's identity limit 0.1 (m = -2.6),
    # 8 clearly above it and not linear (m = +6): the old count said 10 > 9 identity layers, supported; each
    # replicate keeps a layer below 0.1 in about 74% of replicates, so the count's interval reaches 9
    values = _scaled(planted([-2.6] * 10 + [6.0] * 8, seed=4), 0.1)
    assert ((values[2] < 0.1).sum(), (values[1] > 0.1).sum()) == (10, 8)
    assert majority_verdict(values[2] < 0.1, values[1] > 0.1) == "supported"  # the old rule
    judged = _e6(values)
    assert judged.verdict == "inconclusive"
    assert judged.metrics["layers_close_to_identity"] == 10
    assert judged.metrics["layers_identity_or_linear_interval"][0] <= 9
    # far from half: decided, both ways (the rule can fail)
    assert _e6(_scaled(planted([-10.0] * 14 + [10.0] * 4, seed=5), 0.1)).verdict == "supported"
    assert _e6(_scaled(planted([10.0] * 14 + [-10.0] * 4, seed=6), 0.1)).verdict == "not_supported"


def _e3(kurt: tuple[np.ndarray, ...]):
    """E3's judgement of per-depth mean |excess kurtosis| ``kurt`` = (estimate, low, high, low per replicate, high
    per replicate) (each replicate's estimate is the middle of its interval), skewness 0 and radius ratio 1 at
    every depth, in both token variants; its synthetic controls on 512 tokens of width 8."""
    est, lo, hi, lo_r, _ = kurt
    reps = lo_r + (est - lo)  # each replicate's estimate (replicate_intervals moves the interval with it)

    def columns(k):  # (..., depth) -> (..., depth, variant, [kurtosis, skewness, cosine])
        c = np.stack([k, np.zeros_like(k), np.zeros_like(k)], axis=-1)
        return np.stack([c, c], axis=-2)

    depths = len(est)
    arrays = {"est": columns(est), "lo": columns(lo), "hi": columns(hi), "reps": columns(reps),
              "lo_rep": columns(lo_r), "rho": np.ones(depths), "buffered": np.full(depths, 512)}
    e3 = E3Gaussianity.__new__(E3Gaussianity)
    e3.depths, e3.massive_ = depths, [0] * depths
    e3.ctx = SimpleNamespace(dim=8, seed=0)
    e3.directions = torch.randn(8, 4, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    return e3.judge(Measured(arrays, {}, {}))


def test_e3_counts_its_gaussian_depths_with_an_interval():
    # mean |kurtosis| = 1 + m se: 10 of 18 depths just below E3's limit 1 (m = -0.5: close by the estimate, but a
    # replicate's estimate crosses 1 in about 31% of replicates), 8 far above (m = +10): the old count said
    # 10 > 9 close depths, supported; the count's interval reaches 9
    values = planted([-0.5] * 10 + [10.0] * 8, seed=8)
    assert (values[0] < 1).sum() == 10
    judged = _e3(values)
    assert judged.verdict == "inconclusive"
    assert judged.metrics["depths_close_to_gaussian"] == 10
    assert judged.metrics["depths_close_interval"][0] <= 9
    assert _e3(planted([-10.0] * 14 + [10.0] * 4, seed=9)).verdict == "supported"
    assert _e3(planted([10.0] * 14 + [-10.0] * 4, seed=10)).verdict == "not_supported"
