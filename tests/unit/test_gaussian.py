"""Gaussian carrier (A5) against scipy quadrature, autograd and torch.distributions, float64."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import integrate
from torch.distributions import MultivariateNormal, kl_divergence

from expattn.core.gaussian import Gaussian
from expattn.core.measure import Measure

F64 = torch.float64


def random_gaussian(gen, *batch, dim):
    a = torch.randn(*batch, dim, dim, generator=gen, dtype=F64)
    cov = a @ a.mT / dim + 0.3 * torch.eye(dim, dtype=F64)
    return Gaussian(torch.randn(*batch, dim, generator=gen, dtype=F64), cov)


def test_log_normalizer_matches_quadrature(gen):
    mu, var = torch.randn((), generator=gen).item(), 0.3 + torch.rand((), generator=gen).item()
    eta = torch.rand(1, 1, generator=gen, dtype=F64) * 2 - 1
    density = lambda x: math.exp(-0.5 * (x - mu) ** 2 / var + x * eta.item()) / math.sqrt(2 * math.pi * var)  # noqa: E731
    z = integrate.quad(density, -math.inf, math.inf, epsabs=0, epsrel=1e-12)[0]
    g = Gaussian(torch.tensor([mu], dtype=F64), torch.tensor([[var]], dtype=F64)).log_normalizer(eta)
    # quad reaches ~1e-12 relative accuracy on this smooth integrand
    assert abs(g.item() - math.log(z)) < 1e-9


def test_mean_and_fisher_are_derivatives_of_log_normalizer(gen):
    carrier = random_gaussian(gen, 2, dim=4)
    eta = torch.randn(2, 3, 4, generator=gen, dtype=F64, requires_grad=True)
    (grad,) = torch.autograd.grad(carrier.log_normalizer(eta).sum(), eta)
    torch.testing.assert_close(carrier.mean(eta.detach()), grad, rtol=0, atol=1e-12)
    hess = torch.autograd.functional.hessian(
        lambda e: carrier.log_normalizer(e.expand(2, 1, 4))[0].sum(), eta[0, 0].detach()
    )
    # batch 0 of the carrier: exact quadratic, so only rounding separates the two
    torch.testing.assert_close(carrier.fisher(eta.detach())[0, 0], hess, rtol=0, atol=1e-12)


def test_log_prob_entropy_kl_match_torch_distributions(gen):
    carrier = random_gaussian(gen, dim=3)
    eta_a, eta_b = torch.randn(1, 3, generator=gen, dtype=F64), torch.randn(1, 3, generator=gen, dtype=F64)
    p_a = MultivariateNormal(carrier.loc + carrier.covariance @ eta_a[0], carrier.covariance)
    p_b = MultivariateNormal(carrier.loc + carrier.covariance @ eta_b[0], carrier.covariance)
    x = torch.randn(5, 1, 3, generator=gen, dtype=F64)
    torch.testing.assert_close(carrier.log_prob(x, eta_a), p_a.log_prob(x), rtol=0, atol=1e-12)
    torch.testing.assert_close(carrier.entropy(eta_a)[0], p_a.entropy(), rtol=0, atol=1e-12)
    torch.testing.assert_close(carrier.kl(eta_a, eta_b)[0], kl_divergence(p_a, p_b), rtol=0, atol=1e-12)
    torch.testing.assert_close(carrier.bregman(eta_a, eta_b)[0], kl_divergence(p_b, p_a), rtol=0, atol=1e-12)
    # E_p[log h] = -H(p) - KL(p || h), with h the carrier itself
    h = MultivariateNormal(carrier.loc, carrier.covariance)
    expected = -p_a.entropy() - kl_divergence(p_a, h)
    torch.testing.assert_close(carrier.expected_log_base(eta_a)[0], expected, rtol=0, atol=1e-12)


def test_sample_moments_within_standard_error(gen):
    carrier = random_gaussian(gen, dim=2)
    eta = torch.randn(1, 2, generator=gen, dtype=F64)
    n = 20000
    x = carrier.sample(eta, n, generator=gen)[:, 0]  # (S, D)
    se = carrier.covariance.diagonal().sqrt() / math.sqrt(n)
    # 5 standard errors: a false alarm has probability ~1e-6 per coordinate
    assert ((x.mean(0) - carrier.mean(eta)[0]).abs() < 5 * se).all()
    cov_se = 5 * math.sqrt(2 / n) * carrier.covariance.diagonal().max()
    assert (torch.cov(x.T) - carrier.covariance).abs().max() < cov_se


def test_conjugate_closed_form_matches_newton_and_attains_mean(gen):
    carrier = random_gaussian(gen, 2, dim=3)
    m = torch.randn(2, 4, 3, generator=gen, dtype=F64)
    value, eta = carrier.conjugate(m)
    newton_value, newton_eta = Measure.conjugate(carrier, m)
    torch.testing.assert_close(carrier.mean(eta), m, rtol=0, atol=1e-10)
    torch.testing.assert_close(value, newton_value, rtol=0, atol=1e-10)
    torch.testing.assert_close(eta, newton_eta, rtol=0, atol=1e-8)
    torch.testing.assert_close(value, -carrier.entropy(eta) - carrier.expected_log_base(eta), rtol=0, atol=1e-10)


def test_float32_large_natural_parameters_stay_finite(gen):
    carrier = random_gaussian(gen, dim=3)
    eta = 1e4 * torch.randn(1, 5, 3, generator=gen, dtype=F64)
    c32 = Gaussian(carrier.loc.float(), carrier.covariance.float())
    for name in ("log_normalizer", "mean", "entropy"):
        lo, hi = getattr(c32, name)(eta.float()), getattr(carrier, name)(eta)
        assert torch.isfinite(lo).all()
        # float32 relative rounding (~1e-7) times a few operations
        torch.testing.assert_close(lo.double(), hi, rtol=1e-5, atol=1e-3)


def test_batch_shapes_broadcast(gen):
    carrier = random_gaussian(gen, 2, 1, dim=3)
    eta = torch.randn(5, 4, 3, generator=gen, dtype=F64)
    assert carrier.log_normalizer(eta).shape == (2, 5, 4)
    assert carrier.fisher(eta).shape == (2, 5, 4, 3, 3)
    with pytest.raises(ValueError, match="eta"):
        random_gaussian(gen, 2, dim=3).mean(torch.randn(3, 4, 3, dtype=F64))
