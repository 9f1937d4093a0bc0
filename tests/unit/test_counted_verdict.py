"""A verdict that counts layers counts them with an interval: a majority that another sample of sequences could
tip is inconclusive, one far from half the layers is decided (through the probe's own bootstrap and rule)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from expattn.probes.hypotheses.base import count_interval, majority_verdict, replicate_intervals
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
