"""Gaussian mixtures (A6, A7) against quadrature, torch.distributions, autograd and Monte Carlo."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate, optimize
from torch.distributions import Categorical, MixtureSameFamily, MultivariateNormal

from expattn.core.mixture import GaussianMixture

F64 = torch.float64


def spd(gen, *batch, dim):
    a = torch.randn(*batch, dim, dim, generator=gen, dtype=F64)
    return a @ a.mT / dim + 0.3 * torch.eye(dim, dtype=F64)


def one_d_mixture(gen, comps=3):
    means = torch.randn(comps, 1, generator=gen, dtype=F64)
    variances = 0.2 + torch.rand(comps, 1, 1, generator=gen, dtype=F64)
    weights = 0.1 + torch.rand(comps, generator=gen, dtype=F64)
    return GaussianMixture(means, variances, weights=weights), means, variances, weights


def test_log_normalizer_matches_quadrature(gen):
    mixture, means, variances, weights = one_d_mixture(gen)
    eta = torch.rand(1, 1, generator=gen, dtype=F64) * 2 - 1
    m, v, w = means[:, 0].numpy(), variances[:, 0, 0].numpy(), weights.numpy()

    def integrand(x):
        return float((w * np.exp(-0.5 * (x - m) ** 2 / v + x * eta.item()) / np.sqrt(2 * math.pi * v)).sum())

    z = integrate.quad(integrand, -40, 40, epsabs=0, epsrel=1e-12)[0]  # the tails beyond 40 are < 1e-100
    # quadrature accuracy ~1e-12 relative
    assert abs(mixture.log_normalizer(eta).item() - math.log(z)) < 1e-9


def test_shared_covariance_mean_is_linear_term_plus_attention(gen):
    means, cov = torch.randn(2, 6, 3, generator=gen, dtype=F64), spd(gen, 2, dim=3)
    weights = 0.1 + torch.rand(2, 6, generator=gen, dtype=F64)
    eta = torch.randn(2, 5, 3, generator=gen, dtype=F64)
    mixture = GaussianMixture(means, cov, weights=weights)
    attention = torch.softmax(weights.log()[:, None, :] + eta @ means.mT, -1) @ means
    expected = (cov[:, None] @ eta[..., None])[..., 0] + attention
    torch.testing.assert_close(mixture.mean(eta), expected, rtol=0, atol=1e-12)
    e = eta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(mixture.log_normalizer(e).sum(), e)
    torch.testing.assert_close(grad, expected, rtol=0, atol=1e-12)


def test_separate_covariances_mean_fisher_log_prob(gen):
    means, covs = torch.randn(4, 2, generator=gen, dtype=F64), spd(gen, 4, dim=2)
    mixture = GaussianMixture(means, covs)
    eta = torch.randn(1, 2, generator=gen, dtype=F64) * 0.5
    e = eta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(mixture.log_normalizer(e).sum(), e)
    torch.testing.assert_close(mixture.mean(eta), grad, rtol=0, atol=1e-12)
    hess = torch.autograd.functional.hessian(lambda v: mixture.log_normalizer(v[None]).sum(), eta[0])
    torch.testing.assert_close(mixture.fisher(eta)[0], hess, rtol=0, atol=1e-10)
    r = mixture.responsibilities(eta)[0]
    reference = MixtureSameFamily(Categorical(probs=r), MultivariateNormal(means + covs @ eta[0], covs))
    x = torch.randn(7, 1, 2, generator=gen, dtype=F64)
    torch.testing.assert_close(mixture.log_prob(x, eta), reference.log_prob(x), rtol=0, atol=1e-12)


def test_sample_and_entropy_within_standard_error(gen):
    mixture = one_d_mixture(gen)[0]
    eta = torch.zeros(1, 1, dtype=F64)
    n = 20000
    x = mixture.sample(eta, n, generator=gen)[:, 0, 0]
    sd = mixture.fisher(eta)[0, 0, 0].sqrt().item()
    # 5 standard errors of the sample mean
    assert abs(x.mean().item() - mixture.mean(eta).item()) < 5 * sd / math.sqrt(n)
    estimate, se = mixture.entropy_estimate(eta, n, generator=gen)

    def p_log_p(v):
        log_p = mixture.log_prob(torch.tensor([[v]], dtype=F64), eta).item()
        return -math.exp(log_p) * log_p

    exact = integrate.quad(p_log_p, -30, 30, epsabs=1e-13, limit=200)[0]
    assert abs(estimate.item() - exact) < 5 * se.item()


def test_jensen_lower_bound(gen):
    means, covs = torch.randn(2, 5, 3, generator=gen, dtype=F64), spd(gen, 2, 5, dim=3)
    weights = torch.rand(2, 5, generator=gen, dtype=F64) + 0.05
    weights = weights / weights.sum(-1, keepdim=True)
    mixture = GaussianMixture(means, covs, weights=weights)
    eta = torch.randn(2, 6, 3, generator=gen, dtype=F64)
    quad = 0.5 * torch.einsum("bqi,bnij,bqj->bqn", eta, covs, eta)
    explicit = (weights[:, None, :] * (quad + eta @ means.mT)).sum(-1)  # seed 000 Prop. 3
    torch.testing.assert_close(mixture.lower_bound(eta), explicit, rtol=0, atol=1e-12)
    assert (mixture.jensen_gap(eta) >= -1e-12).all()
    e = eta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(mixture.lower_bound(e).sum(), e)
    torch.testing.assert_close(mixture.lower_bound_mean(eta), grad, rtol=0, atol=1e-12)


def test_zero_weight_removes_component(gen):
    means, cov = torch.randn(4, 2, generator=gen, dtype=F64), spd(gen, dim=2)
    eta = torch.randn(3, 2, generator=gen, dtype=F64)
    w = torch.tensor([0.5, 0.0, 1.0, 2.0], dtype=F64)
    full = GaussianMixture(means, cov, weights=w)
    kept = GaussianMixture(means[[0, 2, 3]], cov, weights=w[[0, 2, 3]])
    torch.testing.assert_close(full.log_normalizer(eta), kept.log_normalizer(eta), rtol=0, atol=1e-12)
    torch.testing.assert_close(full.mean(eta), kept.mean(eta), rtol=0, atol=1e-12)


def test_conjugate_matches_scipy(gen):
    means, covs = torch.randn(3, 2, generator=gen, dtype=F64), spd(gen, 3, dim=2)
    mixture = GaussianMixture(means, covs)
    m = mixture.mean(torch.randn(1, 2, generator=gen, dtype=F64))

    def negative(v):
        e = torch.from_numpy(v)[None].requires_grad_(True)
        g = mixture.log_normalizer(e).sum() - (e * m).sum()
        return g.item(), torch.autograd.grad(g, e)[0][0].numpy()

    result = optimize.minimize(negative, np.zeros(2), jac=True, method="BFGS", options={"gtol": 1e-11})
    value, eta = mixture.conjugate(m)
    # BFGS to gtol 1e-11: the optimal value is accurate to ~1e-12 (error quadratic in the gradient)
    assert abs(value.item() + result.fun) < 1e-9
    torch.testing.assert_close(mixture.mean(eta), m, rtol=0, atol=1e-9)
