"""Cloud metrics against numpy/scipy computations, and the calibration of the Gaussianity tests."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats
from scipy.spatial.distance import pdist

from expattn.dynamics import metrics as M


def _cloud(gen, b=3, t=40, d=5):
    a = torch.randn(d, d, generator=gen, dtype=torch.float64)
    return torch.randn(b, t, d, generator=gen, dtype=torch.float64) @ a + torch.randn(d, generator=gen).double()


def test_spread_metrics_match_numpy(gen):
    x = _cloud(gen)
    for i, cloud in enumerate(x.numpy()):
        cov = np.cov(cloud.T, bias=True)
        # float64 throughout; differences are reduction-order rounding of O(10) numbers.
        assert M.trace_cov(x)[i].item() == pytest.approx(np.trace(cov), rel=1e-12)
        assert M.logdet_cov(x)[i].item() == pytest.approx(np.linalg.slogdet(cov)[1], rel=1e-10)
        entropy = stats.multivariate_normal(mean=cloud.mean(0), cov=cov).entropy()
        assert M.gaussian_entropy(x)[i].item() == pytest.approx(entropy, rel=1e-10)
        assert M.diameter(x)[i].item() == pytest.approx(pdist(cloud).max(), rel=1e-12)
        dist = np.linalg.norm(cloud - cloud.mean(0), axis=1).mean()
        assert M.mean_distance_to_centroid(x)[i].item() == pytest.approx(dist, rel=1e-12)
        sv = np.linalg.svd(cloud - cloud.mean(0), compute_uv=False)
        p = sv / sv.sum()
        assert M.effective_rank(x)[i].item() == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-10)
        assert M.stable_rank(x)[i].item() == pytest.approx((sv**2).sum() / sv[0] ** 2, rel=1e-10)
        unit = cloud / np.linalg.norm(cloud, axis=1, keepdims=True)
        cos = unit @ unit.T
        off = (cos.sum() - np.trace(cos)) / (len(cloud) * (len(cloud) - 1))
        assert M.mean_pairwise_cosine(x)[i].item() == pytest.approx(off, rel=1e-10, abs=1e-13)


def test_diameter_chunks_agree(gen, monkeypatch):
    x = _cloud(gen, b=2, t=37, d=3)
    full = M.diameter(x)
    monkeypatch.setattr(M, "CHUNK", 5)
    torch.testing.assert_close(M.diameter(x), full, rtol=0, atol=0)


def test_point_cloud_has_rank_zero(gen):
    x = torch.randn(1, 1, 4, generator=gen, dtype=torch.float64).expand(2, 10, 4)
    assert M.effective_rank(x).tolist() == [0.0, 0.0]
    assert M.stable_rank(x).tolist() == [0.0, 0.0]


def test_mardia_matches_direct_formula(gen):
    x = _cloud(gen, b=2, t=30, d=3)
    out = M.mardia(x)
    for i, cloud in enumerate(x.numpy()):
        c = cloud - cloud.mean(0)
        g = c @ np.linalg.inv(np.cov(cloud.T, bias=True)) @ c.T  # Mahalanobis inner products
        b1, b2 = (g**3).mean(), (np.diag(g) ** 2).mean()
        assert out["skewness"][i].item() == pytest.approx(b1, rel=1e-9)
        assert out["kurtosis"][i].item() == pytest.approx(b2, rel=1e-10)
        assert out["skewness_p"][i].item() == pytest.approx(stats.chi2.sf(30 * b1 / 6, 10), rel=1e-8)


def test_gaussianity_tests_hold_their_level_and_reject_skew(gen):
    gauss = torch.randn(100, 300, 3, generator=gen, dtype=torch.float64)
    skewed = torch.randn(5, 300, 3, generator=gen, dtype=torch.float64).exp()
    sw = M.sliced_wasserstein_gaussian(gauss, gen, directions=16, null_draws=40)
    mardia = M.mardia(gauss)
    # Under the null each p-value is (close to) uniform: 100 clouds reject at 5% about 5 times;
    # a binomial(100, 0.05) count exceeds 13 with probability < 0.1% (two-sided band 0..13).
    for p in (sw["p_value"], mardia["skewness_p"], mardia["kurtosis_p"]):
        assert 0 <= int((p < 0.05).sum()) <= 13
    assert 0.8 < sw["excess"].mean().item() < 1.2  # the null mean is the scale of a Gaussian cloud's SW
    # A log-normal cloud of 300 points is far from Gaussian: SW beyond every null draw.
    swk = M.sliced_wasserstein_gaussian(skewed, gen, directions=16, null_draws=40)
    assert (swk["p_value"] <= 1 / 41 + 1e-12).all()
    assert (M.mardia(skewed)["skewness_p"] < 1e-6).all()


def test_sliced_wasserstein_ignores_scale_and_shift(gen):
    x = _cloud(gen, b=2, t=60, d=4)
    lhs = M.sliced_wasserstein_gaussian(x, torch.Generator().manual_seed(5))["sw"]
    # A positive scaling and a shift leave the whitened cloud unchanged (same directions, same null).
    rhs = M.sliced_wasserstein_gaussian(2.5 * x - 4.0, torch.Generator().manual_seed(5))["sw"]
    torch.testing.assert_close(lhs, rhs, rtol=1e-10, atol=0)


def test_bad_clouds_raise(gen):
    with pytest.raises(ValueError, match="batch, token, dim"):
        M.trace_cov(torch.randn(5, 3, generator=gen))
    with pytest.raises(ValueError, match="at least 2 tokens"):
        M.trace_cov(torch.randn(2, 1, 3, generator=gen))
    with pytest.raises(ValueError, match="singular"):
        M.mardia(torch.randn(1, 10, 1, generator=gen).expand(1, 10, 3).double())
    with pytest.raises(ValueError, match="zero vector"):
        M.mean_pairwise_cosine(torch.zeros(1, 3, 2))
    with pytest.raises(ValueError, match="finite"):
        M.diameter(torch.full((1, 3, 2), float("inf")))
