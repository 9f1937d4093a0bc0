"""The Gaussianity tests of the B5/B6 presets accept a Gaussian sample and reject two clusters that
whitening leaves bimodal along one axis (coordinate kurtosis about 1.09, a Gaussian's is 3)."""

from __future__ import annotations

import torch

from expattn.dynamics.clouds import make_cloud
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
