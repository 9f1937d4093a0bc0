"""E3's shape statistics tell a sphere, a Gaussian and heavy tails apart (synthetic clouds with known answers)."""

from __future__ import annotations

import math

import pytest
import torch

from expattn.probes.hypotheses.e3_shape import (
    RADIUS_BAND,
    SPHERE_POWER,
    close_and_far,
    control_clouds,
    direction_moments,
    principal_kurtosis,
    radius_ratio,
    spectrum,
    sphere_power,
)


def _mix(gen, dim):
    return torch.randn(dim, dim, generator=gen, dtype=torch.float64) / math.sqrt(dim)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_radius_ratio_separates_sphere_gaussian_and_student_t(seed):
    gen = torch.Generator().manual_seed(seed)
    n, dim = 2000, 50
    g = torch.randn(n, dim, generator=gen, dtype=torch.float64)
    mix = _mix(gen, dim)  # an anisotropic linear image: the statistic is affine invariant
    chi2 = 2 * torch._standard_gamma(torch.full((n, 1), 2.5, dtype=torch.float64), generator=gen)
    gaussian = radius_ratio(spectrum(g @ mix))
    sphere = radius_ratio(spectrum((g / g.norm(dim=1, keepdim=True)) @ mix))
    student = radius_ratio(spectrum((g / (chi2 / 5).sqrt()) @ mix))
    # Var(d) of the Gaussian is the exact Beta value; its estimate from 2000 points has a relative sd of about
    # sqrt(2/n) * 2 (d is skewed): 0.85-1.18 is about 2.5 sd either side.
    assert 0.85 < gaussian < 1.18
    # On a sphere every Mahalanobis radius is the same up to the covariance estimate: far below 1.
    assert sphere < 0.3
    # Student t5: d is a scale mixture, Var(d) grows with the tails (fourth moment of 1/chi2_5): far above 1.
    assert student > 3


def test_radius_ratio_uses_the_range_of_a_singular_covariance():
    gen = torch.Generator().manual_seed(3)
    g = torch.randn(1500, 30, generator=gen, dtype=torch.float64)
    flat = torch.cat([g, g[:, :1] + g[:, 1:2]], dim=1)  # 31 coordinates, rank 30: like LayerNorm's hyperplane
    assert 0.85 < radius_ratio(spectrum(flat)) < 1.18


def test_too_few_tokens_for_the_rank_gives_nan():
    x = torch.randn(10, 20, dtype=torch.float64)
    assert math.isnan(radius_ratio(spectrum(x)))


def test_random_directions_alone_cannot_tell_a_sphere_from_a_gaussian_but_the_rule_can():
    clouds = control_clouds(1024, 64, seed=0)
    directions = torch.randn(64, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    directions /= directions.norm(dim=0)
    verdicts = {}
    for name, (kind, cloud) in clouds.items():
        kurt, skew = direction_moments(cloud, directions)
        close, far = close_and_far(*(torch.tensor([v]) for v in (kurt, skew, radius_ratio(spectrum(cloud)), kurt)))
        verdicts[name] = (kind, bool(close), bool(far), kurt)
    # both are below the kurtosis limit along random directions ...
    assert verdicts["Gaussian cloud"][3] < 1 and verdicts["points on a sphere"][3] < 1
    # ... the radius ratio separates them, and every control comes out as its kind demands
    assert verdicts["Gaussian cloud"][:3] == ("positive", True, False)
    assert verdicts["points on a sphere"][:3] == ("negative", False, True)
    assert verdicts["Student t (5 degrees of freedom)"][:3] == ("negative", False, True)


def test_principal_kurtosis_of_a_gaussian_is_near_zero_and_of_a_spike_large():
    gen = torch.Generator().manual_seed(4)
    g = torch.randn(4000, 8, generator=gen, dtype=torch.float64)
    assert abs(principal_kurtosis(spectrum(g))) < 0.5  # sd of sample excess kurtosis is sqrt(24/4000) = 0.08
    g[:20, 3] *= 30  # a few outliers on one channel, as a massive activation would make
    assert principal_kurtosis(spectrum(g)) > 50


@pytest.mark.parametrize(("n", "p"), [(1024, 576), (1024, 384), (1600, 960)])
def test_a_spheres_radius_ratio_is_about_p_over_n(n, p):
    gen = torch.Generator().manual_seed(n + p)
    x = torch.randn(n, p, generator=gen, dtype=torch.float64)
    rho = radius_ratio(spectrum(x / x.norm(dim=1, keepdim=True)))
    assert abs(rho - p / n) < 0.08  # measured spread +-0.04 over 8 draws
    assert sphere_power(n, p) == (p / n <= SPHERE_POWER)


def test_the_probes_quick_and_full_sizes_give_e3_the_power_to_reject_a_sphere():
    # the kept tokens per depth (a first token per sequence of 128 left out, at most buffer_size) against each
    # packaged model's width: below the power limit, a sphere's ratio (about p/n) sits below the band
    from expattn.probes.budgets import DEFAULT_TOKENS, QUICK_TOKENS
    from expattn.probes.hypotheses.e3_shape import buffer_size

    width = {"minilm": 384, "smollm2": 576, "gemma3": 640, "qwen2.5-0.5b": 896, "qwen2.5-1.5b": 1536}
    assert set(DEFAULT_TOKENS) == set(QUICK_TOKENS) == set(width)
    for table in (QUICK_TOKENS, DEFAULT_TOKENS):
        for model, tokens in table.items():
            kept = min(buffer_size(width[model]), tokens - tokens // 128)
            assert sphere_power(kept, width[model]), (model, tokens, kept)
            assert width[model] / kept + 0.08 < RADIUS_BAND[0]


def test_a_wider_model_keeps_enough_tokens_for_the_radius_ratio():
    # 1,024 tokens cannot tell a sphere in width 640 (p/n = 0.625 > 0.6); 1,067 = ceil(640 / 0.6) can
    from expattn.probes.hypotheses.e3_shape import BUFFER, buffer_size

    assert buffer_size(384) == buffer_size(576) == BUFFER == 1024
    assert buffer_size(640) == 1067
    assert not sphere_power(1024, 640) and sphere_power(1067, 640) and not sphere_power(1066, 640)
