"""The Gaussianity decision of the B5/B6 presets accepts a Gaussian sample and rejects two clusters that
whitening leaves bimodal along one axis (coordinate kurtosis about 1.09, a Gaussian's is 3); Holm's procedure;
the Monte Carlo p-values are uniform under the null."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats as scipy_stats

from expattn.dynamics.clouds import make_cloud
from expattn.dynamics.gaussianity import draws_for, gaussian_family, holm
from expattn.dynamics.metrics import DegenerateCloud, conditioning, mardia, rank_tolerance
from expattn.nn.norms import NormConfig, Whitening


def test_a_gaussian_sample_is_accepted_and_two_whitened_clusters_in_d8_are_not():
    gen = torch.Generator().manual_seed(0)
    rn = Whitening(NormConfig(dim=8))
    gaussian = torch.randn(1, 600, 8, generator=gen, dtype=torch.float64)
    (gaussian_ok, _), (clusters_ok, stats) = gaussian_family(
        [gaussian, rn(make_cloud("two_clusters", 1, 600, 8, gen))], gen
    )
    assert gaussian_ok
    assert not clusters_ok
    # (16 + 6*4*0.09 + 3*0.3^4) / 4.09^2 - 3 = -1.91 excess kurtosis, SE about sqrt(24/600) = 0.2: z about 9.5
    assert 7 < stats["coordinate_kurtosis_z"] < 12
    assert stats["coordinate_kurtosis_p"] == pytest.approx(1 / (1 + stats["null_draws"]), rel=1e-9)  # beyond all
    # Mardia's kurtosis alone misses it: the cloud's b2 is about 78 against 80 for a Gaussian in D = 8
    assert stats["kurtosis_p"] > 1e-3


def _rank_deficient(seed: int) -> tuple[torch.Tensor, torch.Generator]:
    """A Gaussian cloud (1, 3000, 9) whose 9th coordinate is 0.7 x_1 - 0.3 x_2: rank 8 in D = 9."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 3000, 8, generator=gen, dtype=torch.float64)
    return torch.cat([x, 0.7 * x[..., :1] - 0.3 * x[..., 1:2]], -1), gen


def test_a_rank_deficient_cloud_is_not_gaussian_on_every_draw_instead_of_by_rounding():
    # Whether a Cholesky factor of such a covariance exists is decided by rounding (about half of these
    # draws fail it): the decision must be explicit, the same on every draw and every machine.
    for seed in range(20):
        x, gen = _rank_deficient(seed)
        (ok, stats), = gaussian_family([x], gen)
        assert not ok
        assert stats["rank_deficient"] == 1.0
        assert stats["covariance_eigenvalue_ratio"] < 1e-14  # rounding level of a rank-8 covariance


def test_the_rank_decision_sits_far_from_both_populations():
    # Full-rank clouds of the presets have eigenvalue ratios >= 1e-2 and collapsed ones <= 1e-14; the
    # threshold sqrt(eps) = 1.5e-8 leaves six decades on either side.
    assert 1e-9 < rank_tolerance(torch.float64) < 1e-7
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 3000, 9, generator=gen, dtype=torch.float64) * torch.logspace(0, -1, 9, dtype=torch.float64)
    assert 1e-3 < float(conditioning(x)[0]) < 1e-1
    (ok, stats), = gaussian_family([x], gen)
    assert ok and stats["rank_deficient"] == 0.0


def test_standardising_a_rank_deficient_cloud_raises_a_named_error():
    x, _ = _rank_deficient(0)
    with pytest.raises(DegenerateCloud, match="numerically singular covariance"):
        mardia(x)


def test_holm_rejects_step_down_and_stops_at_the_first_acceptance():
    # m = 4 at alpha 0.05: levels 0.0125, 0.0167, 0.025, 0.05 for the sorted p-values.
    assert holm([0.01, 0.04, 0.012, 0.3], 0.05) == [True, False, True, False]  # 0.04 > 0.025: stop there
    assert holm([0.011, 0.016, 0.024, 0.049], 0.05) == [True, True, True, True]
    assert holm([0.013, 0.001], 0.05) == [True, True]  # 0.001 <= 0.025, then 0.013 <= 0.05
    assert holm([0.03, 0.03], 0.05) == [False, False]  # 0.03 > 0.025: nothing
    assert holm([], 0.05) == []


def test_the_null_is_large_enough_to_reach_holms_smallest_level():
    for tests, alpha in ((9, 1e-3), (48, 1e-3), (3, 0.05)):
        assert 1 / (1 + draws_for(tests, alpha)) <= alpha / tests


def test_monte_carlo_p_values_are_uniform_for_gaussian_clouds():
    # 200 Gaussian clouds (T = 100, D = 3) with arbitrary mean and covariance, each its own decision with a
    # 1,000-draw null: the p-values must be uniform (Kolmogorov-Smirnov p > 1e-3). This checks the bulk; the
    # benchmark bench_gaussianity_null.py checks the tail, at the decisions' sizes.
    gen = torch.Generator().manual_seed(3)
    mix = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    rows = [gaussian_family([torch.randn(1, 100, 3, generator=gen, dtype=torch.float64) @ mix + 5.0], gen)[0][1]
            for _ in range(200)]
    for key in ("kurtosis_p", "coordinate_kurtosis_p"):
        p = np.array([r[key] for r in rows])
        assert scipy_stats.kstest(p, "uniform").pvalue > 1e-3, key
    # Mardia's chi-square skewness test is conservative at this size: at most 0.1 + 3 binomial SE (0.064) below 0.1
    assert np.mean([r["skewness_p"] <= 0.1 for r in rows]) <= 0.164
    # ... and a uniform cloud, as the decision sizes it, gets small ones (the test can fail)
    cube = torch.rand(1, 1000, 3, generator=gen, dtype=torch.float64)  # Mardia kurtosis z about -10
    (ok, stats), = gaussian_family([cube], gen)
    assert not ok and stats["kurtosis_p"] < 0.01
