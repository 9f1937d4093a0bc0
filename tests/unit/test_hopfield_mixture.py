"""Modern continuous Hopfield density = Gaussian mixture (D6): normaliser, samples vs energy."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from expattn.core.energy import make_prior
from expattn.core.hopfield_mixture import HopfieldMixture
from expattn.core.rbm import effective_energy


def mixture(gen, n, d, beta=1.0, scale=1.5):
    return HopfieldMixture(scale * torch.randn(n, d, generator=gen, dtype=torch.float64), beta)


def unnormalised(model, points):
    """exp(-beta E(v)) from the energy alone, on a numpy array of points."""
    v = torch.as_tensor(np.atleast_2d(points), dtype=torch.float64)
    return torch.exp(-model.beta * model.energy(v)).numpy()


def test_energy_density_equals_mixture_density(gen):
    for beta in (0.5, 1.0, 3.0):
        model = mixture(gen, 7, 5, beta)
        v = 2 * torch.randn(50, 5, generator=gen, dtype=torch.float64)
        # Two float64 routes to the same log-density: rounding only.
        torch.testing.assert_close(model.log_density(v), model.mixture_log_density(v), rtol=0, atol=1e-11)
    assert model.log_weights().exp().sum().item() == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("beta", [0.7, 2.0])
def test_normaliser_matches_quadrature_1d_2d(beta, gen):
    m1 = mixture(gen, 4, 1, beta)
    z1, _ = integrate.quad(lambda x: unnormalised(m1, [[x]])[0], -np.inf, np.inf, epsabs=0, epsrel=1e-12, limit=200)
    # quad at epsrel 1e-12 on a smooth, Gaussian-tailed integrand.
    assert math.log(z1) == pytest.approx(m1.log_normalizer().item(), abs=1e-9)
    m2 = mixture(gen, 3, 2, beta)
    # Trapezoid on a fine grid over +-12 beta^-1/2 around the patterns: the Gaussian tails beyond
    # are below 1e-30 and the rule is spectrally accurate for such integrands.
    lo = m2.patterns.min().item() - 12 / math.sqrt(beta)
    hi = m2.patterns.max().item() + 12 / math.sqrt(beta)
    grid = np.linspace(lo, hi, 801)
    xx, yy = np.meshgrid(grid, grid, indexing="ij")
    f = unnormalised(m2, np.stack([xx.ravel(), yy.ravel()], -1)).reshape(xx.shape)
    z2 = np.trapezoid(np.trapezoid(f, grid, axis=1), grid)
    assert math.log(z2) == pytest.approx(m2.log_normalizer().item(), abs=1e-9)


def test_samples_match_energy_ks_1d(gen):
    model = mixture(gen, 5, 1, beta=1.5)
    _, samples = model.sample(20_000, gen)
    grid = np.linspace(-20, 20, 40_001)
    density = unnormalised(model, grid[:, None])
    cdf = integrate.cumulative_trapezoid(density, grid, initial=0.0)
    cdf /= cdf[-1]
    result = stats.kstest(samples[:, 0].numpy(), lambda x: np.interp(x, grid, cdf))
    # Seeded draw; a true null fails this only with probability 1e-3.
    assert result.pvalue > 1e-3
    # The test has power: the same samples against the energy at a wrong beta are rejected.
    wrong = HopfieldMixture(model.patterns, beta=0.75)
    cdf_w = integrate.cumulative_trapezoid(unnormalised(wrong, grid[:, None]), grid, initial=0.0)
    cdf_w /= cdf_w[-1]
    assert stats.kstest(samples[:, 0].numpy(), lambda x: np.interp(x, grid, cdf_w)).pvalue < 1e-6


def test_samples_match_energy_chi2_2d(gen):
    model = mixture(gen, 4, 2, beta=1.0)
    n = 20_000
    _, samples = model.sample(n, gen)
    edges = np.linspace(-7, 7, 15)
    fine = np.linspace(-25, 25, 1001)
    xx, yy = np.meshgrid(fine, fine, indexing="ij")
    density = unnormalised(model, np.stack([xx.ravel(), yy.ravel()], -1)).reshape(xx.shape)
    density /= density.sum()
    # Expected cell probabilities from the energy on the fine grid, outer cells merged into one.
    cell_x, cell_y = np.digitize(fine, edges), np.digitize(fine, edges)
    expected = np.zeros((len(edges) + 1, len(edges) + 1))
    np.add.at(expected, (cell_x[:, None].repeat(len(fine), 1), cell_y[None, :].repeat(len(fine), 0)), density)
    s = samples.numpy()
    observed = np.zeros_like(expected)
    np.add.at(observed, (np.digitize(s[:, 0], edges), np.digitize(s[:, 1], edges)), 1)
    keep = expected * n >= 5  # the chi-square approximation needs >= 5 expected counts per cell
    obs = np.append(observed[keep], observed[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum()) * n
    stat = ((obs - exp) ** 2 / exp).sum()
    assert stats.chi2.sf(stat, len(obs) - 1) > 1e-3


def test_samples_match_energy_moments_high_dim(gen):
    """Moments of mixture samples vs self-normalised importance sampling from the energy alone."""
    d, n = 6, 40_000
    model = mixture(gen, 5, d, beta=1.0, scale=1.0)
    _, samples = model.sample(n, gen)
    centre = model.patterns.mean(0)
    # Diagonal Gaussian proposal a little wider (x1.3) than the density's per-coordinate variance.
    spread = 1.3 * (1.0 + model.patterns.var(0))
    proposal = centre + spread.sqrt() * torch.randn(4 * n, d, generator=gen, dtype=torch.float64)
    log_q = -0.5 * (((proposal - centre) ** 2) / spread).sum(-1)
    log_w = -model.energy(proposal) - log_q
    w = torch.softmax(log_w, 0)
    ess = 1.0 / (w**2).sum().item()
    assert ess > 0.05 * len(w)  # enough effective draws for the error estimate below to be honest
    for f in (lambda x: x, lambda x: x**2):
        fs, fp = f(samples), f(proposal)
        is_mean = (w.unsqueeze(-1) * fp).sum(0)
        is_se = torch.sqrt((w.unsqueeze(-1) ** 2 * (fp - is_mean) ** 2).sum(0))
        mc_se = fs.std(0) / math.sqrt(n)
        z = (fs.mean(0) - is_mean) / torch.sqrt(is_se**2 + mc_se**2)
        # 2d comparisons at five standard errors: a false alarm has probability < 1e-5.
        assert z.abs().max().item() < 5
    # The closed-form moments of the mixture agree with the samples too.
    z_mean = (samples.mean(0) - model.mean()) / (samples.std(0) / math.sqrt(n))
    assert z_mean.abs().max().item() < 5


def test_component_is_one_hidden_unit_with_constant_prior(gen):
    model = mixture(gen, 4, 3)
    v = torch.randn(9, 3, generator=gen, dtype=torch.float64)
    unit = make_prior("constant", c=1.0)
    components = torch.stack(
        [
            effective_energy(
                v,
                model.patterns[mu : mu + 1].T,
                unit,
                torch.zeros(3, dtype=torch.float64),
                torch.ones(3, dtype=torch.float64),
            )
            for mu in range(4)
        ],
        -1,
    )
    # E(v) = -logsumexp_mu(-E_mu(v)) when beta = 1: the mixture of one-unit effective energies.
    torch.testing.assert_close(model.energy(v), -torch.logsumexp(-components, -1), rtol=0, atol=1e-12)


def test_bad_arguments(gen):
    patterns = torch.randn(3, 2, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match="beta must be"):
        HopfieldMixture(patterns, beta=0.0)
    with pytest.raises(ValueError, match="patterns must"):
        HopfieldMixture(patterns[:0])
    with pytest.raises(TypeError, match="patterns must be a floating tensor"):
        HopfieldMixture(torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="v must have shape"):
        HopfieldMixture(patterns).energy(torch.zeros(4, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="num_samples must be"):
        HopfieldMixture(patterns).sample(0)
