"""The Gaussianity tests of the B5/B6 presets accept a Gaussian sample and reject two clusters that
whitening leaves bimodal along one axis (coordinate kurtosis about 1.09, a Gaussian's is 3)."""

from __future__ import annotations

import pytest
import torch

from expattn.dynamics.clouds import make_cloud
from expattn.dynamics.metrics import DegenerateCloud, conditioning, mardia, rank_tolerance
from expattn.nn.norms import NormConfig, Whitening
from expattn.presets.b_equilibrium import is_gaussian


def test_a_gaussian_sample_is_accepted_and_two_whitened_clusters_in_d8_are_not():
    gen = torch.Generator().manual_seed(0)
    rn = Whitening(NormConfig(dim=8))
    gaussian_ok, _ = is_gaussian(torch.randn(1, 600, 8, generator=gen, dtype=torch.float64), gen)
    clusters_ok, stats = is_gaussian(rn(make_cloud("two_clusters", 1, 600, 8, gen)), gen)
    assert gaussian_ok
    assert not clusters_ok
    # (16 + 6*4*0.09 + 3*0.3^4) / 4.09^2 - 3 = -1.91 excess kurtosis, SE sqrt(24/600) = 0.2: z about 9.5
    assert 7 < stats["coordinate_kurtosis_z"] < 12
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
        ok, stats = is_gaussian(x, gen)
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
    ok, stats = is_gaussian(x, gen)
    assert ok and stats["rank_deficient"] == 0.0


def test_standardising_a_rank_deficient_cloud_raises_a_named_error():
    x, _ = _rank_deficient(0)
    with pytest.raises(DegenerateCloud, match="numerically singular covariance"):
        mardia(x)
