"""Tilted exponential-family carriers (A4) against torch.distributions, numpy sums and quadrature."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, special
from torch.distributions import Gamma, MultivariateNormal, kl_divergence

from expattn.core.gaussian import Gaussian
from expattn.core.tilted import TiltedGamma, TiltedGaussian, TiltedLattice

F64 = torch.float64
GRID = torch.arange(-3.0, 4.0, dtype=F64)


def gamma_carrier(gen, *batch, dim=2):
    eta1 = -1.5 - 2 * torch.rand(*batch, dim, generator=gen, dtype=F64)
    eta2 = -0.5 + 1.5 * torch.rand(*batch, dim, generator=gen, dtype=F64)
    return TiltedGamma(eta1, eta2)


def test_gamma_against_torch_distributions(gen):
    carrier = gamma_carrier(gen, 2)
    eta = torch.rand(2, 3, 2, generator=gen, dtype=F64) * 2 - 1
    shape, rate = (carrier.eta2 + 1)[:, None, :], -(carrier.eta1[:, None, :] + eta)
    p = Gamma(shape, rate)
    torch.testing.assert_close(carrier.mean(eta), p.mean, rtol=0, atol=1e-12)
    torch.testing.assert_close(carrier.fisher(eta), torch.diag_embed(p.variance), rtol=0, atol=1e-12)
    torch.testing.assert_close(carrier.entropy(eta), p.entropy().sum(-1), rtol=0, atol=1e-12)
    x = 0.1 + torch.rand(4, 2, 3, 2, generator=gen, dtype=F64) * 3
    torch.testing.assert_close(carrier.log_prob(x, eta), p.log_prob(x).sum(-1), rtol=0, atol=1e-12)
    eta_b = eta.flip(1)
    q = Gamma(shape, -(carrier.eta1[:, None, :] + eta_b))
    torch.testing.assert_close(carrier.kl(eta, eta_b), kl_divergence(p, q).sum(-1), rtol=0, atol=1e-12)
    # E[u2] = E[log x] = digamma(shape) - log(rate)
    _, mean_log = carrier.tilted_moments(eta)
    torch.testing.assert_close(mean_log, torch.digamma(shape) - torch.log(rate), rtol=0, atol=1e-12)


def test_gamma_gradient_matches_quadrature_of_carrier(gen):
    carrier = gamma_carrier(gen, dim=1)
    e1, e2, eta = carrier.eta1.item(), carrier.eta2.item(), torch.rand(()).item() - 0.5
    alpha, beta = e2 + 1, -e1

    def h(x, k):
        return x**k * math.exp(
            (alpha - 1) * math.log(x) - beta * x + alpha * math.log(beta) - math.lgamma(alpha) + x * eta
        )

    z, first = (integrate.quad(h, 0, math.inf, args=(k,), epsabs=0, epsrel=1e-12)[0] for k in (0, 1))
    e = torch.tensor([[eta]], dtype=F64)
    # quadrature with a weak x^(alpha-1) singularity at 0: ~1e-10 relative accuracy
    assert abs(carrier.log_normalizer(e).item() - math.log(z)) < 1e-8
    assert abs(carrier.mean(e).item() - first / z) < 1e-8


def test_gamma_domain_is_enforced(gen):
    carrier = gamma_carrier(gen, dim=2)
    outside = (-carrier.eta1 + 0.1)[None]
    assert not carrier.in_domain(outside).any()
    with pytest.raises(ValueError, match="eta1 \\+ eta < 0"):
        carrier.log_normalizer(outside)
    value, eta = carrier.conjugate(torch.tensor([[0.7, 2.5]], dtype=F64))
    # closed form: rate = shape / m, so eta = -rate - eta1
    expected = -(carrier.eta2 + 1) / torch.tensor([0.7, 2.5], dtype=F64) - carrier.eta1
    torch.testing.assert_close(eta[0], expected, rtol=0, atol=1e-9)
    assert carrier.in_domain(eta).all()
    torch.testing.assert_close(value, -carrier.entropy(eta) - carrier.expected_log_base(eta), rtol=0, atol=1e-9)


def test_gamma_sample_mean_within_standard_error(gen):
    carrier = gamma_carrier(gen, dim=2)
    eta = torch.zeros(1, 2, dtype=F64)
    n = 20000
    x = carrier.sample(eta, n, generator=gen)[:, 0]
    se = carrier.fisher(eta)[0].diagonal().sqrt() / math.sqrt(n)
    assert ((x.mean(0) - carrier.mean(eta)[0]).abs() < 5 * se).all()  # 5 standard errors
    again = carrier.sample(eta, 3, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(again, carrier.sample(eta, 3, generator=torch.Generator().manual_seed(7)))


def test_lattice_against_numpy_sums(gen):
    eta1 = torch.randn(3, generator=gen, dtype=F64)
    eta2 = -0.3 * torch.rand(3, generator=gen, dtype=F64)
    carrier = TiltedLattice(GRID, eta1, eta2)
    eta = torch.randn(4, 3, generator=gen, dtype=F64)
    s = GRID.numpy()
    for q in range(4):
        logits = np.outer(eta1.numpy() + eta[q].numpy(), s) + np.outer(eta2.numpy(), s**2)  # (D, K)
        base = np.outer(eta1.numpy(), s) + np.outer(eta2.numpy(), s**2)
        p = special.softmax(logits, axis=-1)
        g = (special.logsumexp(logits, axis=-1) - special.logsumexp(base, axis=-1)).sum()
        assert abs(carrier.log_normalizer(eta[q : q + 1]).item() - g) < 1e-12
        np.testing.assert_allclose(carrier.mean(eta[q : q + 1])[0].numpy(), p @ s, rtol=0, atol=1e-12)
        np.testing.assert_allclose(
            carrier.fisher(eta[q : q + 1])[0].diagonal().numpy(), p @ s**2 - (p @ s) ** 2, rtol=0, atol=1e-12
        )
        assert abs(carrier.entropy(eta[q : q + 1]).item() + (p * np.log(p)).sum()) < 1e-12
    off_grid = torch.full((1, 1, 3), 0.5, dtype=F64)
    assert torch.isneginf(carrier.log_prob(off_grid, eta[:1])).all()
    value, star = carrier.conjugate(carrier.mean(eta))
    torch.testing.assert_close(star, eta, rtol=0, atol=1e-7)
    # G*(m) = eta.m - G(eta) at the true natural parameter
    torch.testing.assert_close(
        value, (eta * carrier.mean(eta)).sum(-1) - carrier.log_normalizer(eta), rtol=0, atol=1e-9
    )


def test_lattice_sample_frequencies(gen):
    carrier = TiltedLattice(GRID, torch.randn(1, generator=gen, dtype=F64), torch.tensor([-0.2], dtype=F64))
    eta = torch.zeros(1, 1, dtype=F64)
    n = 20000
    x = carrier.sample(eta, n, generator=gen)[:, 0, 0]
    p = carrier.grid_probs(eta)[0, 0]
    freq = (x[:, None] == GRID).double().mean(0)
    # binomial standard error per grid point, 5 of them
    assert ((freq - p).abs() <= 5 * (p * (1 - p) / n).sqrt() + 1e-12).all()


def test_tilted_gaussian_is_the_gaussian(gen):
    a = torch.randn(3, 3, generator=gen, dtype=F64)
    precision = a @ a.T / 3 + 0.5 * torch.eye(3, dtype=F64)
    eta1 = torch.randn(3, generator=gen, dtype=F64)
    tilted = TiltedGaussian(eta1, -0.5 * precision)
    cov = torch.linalg.inv(precision)
    gaussian = Gaussian(cov @ eta1, cov)
    eta = torch.randn(2, 3, generator=gen, dtype=F64)
    for name in ("log_normalizer", "mean", "fisher", "entropy", "expected_log_base"):
        torch.testing.assert_close(getattr(tilted, name)(eta), getattr(gaussian, name)(eta), rtol=0, atol=1e-10)
    mean_x, second = tilted.tilted_moments(eta)
    expected_second = cov + mean_x[..., :, None] * mean_x[..., None, :]
    torch.testing.assert_close(second, expected_second, rtol=0, atol=1e-10)
    x = torch.randn(5, 2, 3, generator=gen, dtype=F64)
    p = MultivariateNormal(gaussian.mean(eta), cov)
    torch.testing.assert_close(tilted.log_prob(x, eta), p.log_prob(x), rtol=0, atol=1e-10)
