"""Checks of the carriers' log-normalizers and gradients: A2, A4, A5, A6, A7.

Every library value is compared with a computation that does not use ``expattn.core``: scipy
quadrature in one or two dimensions, numpy sums over atoms or grid points, closed forms
written out with numpy. All in float64.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special

from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.references import (
    discrete_family,
    gamma_log_pdf,
    gaussian_log_partition_2d,
    mixture_log_pdf,
    moments_1d,
    normal_log_pdf,
)
from expattn.checks.spd import wishart_spd
from expattn.checks.tools import compare, generator, randn
from expattn.core.empirical import Empirical
from expattn.core.gaussian import Gaussian
from expattn.core.measure import Measure
from expattn.core.mixture import GaussianMixture
from expattn.core.tilted import TiltedGamma, TiltedGaussian, TiltedLattice

F64 = torch.float64
LATTICE = torch.arange(-4.0, 5.0, dtype=F64)


def uniform(gen: torch.Generator, lo: float, hi: float, *shape: int) -> torch.Tensor:
    """Uniform float64 draws on [lo, hi)."""
    return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=F64)


def autograd_mean(measure: Measure, eta: torch.Tensor) -> torch.Tensor:
    r"""$\nabla_\eta G$ by reverse-mode autograd of the library's ``log_normalizer``."""
    eta = eta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(measure.log_normalizer(eta).sum(), eta)
    return grad


def scalar(t: torch.Tensor) -> float:
    return float(t.reshape(-1)[0])


def one_d_carriers(gen: torch.Generator):
    """Random one-dimensional carriers as ``(name, measure, log_h, lo, hi)`` with a numpy ``log h``."""
    mu, var = scalar(randn(gen, 1)), scalar(uniform(gen, 0.3, 2.0, 1))
    yield (
        "gaussian",
        Gaussian(torch.tensor([mu], dtype=F64), torch.tensor([[var]], dtype=F64)),
        (lambda x: normal_log_pdf(x, mu, var)),
        -math.inf,
        math.inf,
    )
    means, variances = randn(gen, 3, 1), uniform(gen, 0.2, 1.5, 3, 1, 1)
    weights = uniform(gen, 0.1, 1.0, 3)
    mixture = GaussianMixture(means, variances, weights=weights)
    m, v, log_w = means[:, 0].numpy(), variances[:, 0, 0].numpy(), np.log(weights.numpy())
    yield "mixture", mixture, mixture_log_pdf(log_w, m, v), -math.inf, math.inf
    eta1, eta2 = scalar(uniform(gen, -3.0, -1.5, 1)), scalar(uniform(gen, -0.5, 1.0, 1))
    yield (
        "tilted_gamma",
        TiltedGamma(torch.tensor([eta1], dtype=F64), torch.tensor([eta2], dtype=F64)),
        (lambda x: gamma_log_pdf(x, eta2 + 1, -eta1)),
        0.0,
        math.inf,
    )


@register_claim(
    "A2",
    method="autograd of G vs E_p(x) by scipy quadrature (1-D Gaussian, mixture, Gamma) and numpy sums "
    "(atoms, lattice), float64",
)
def check_a2(ctx: RunContext):
    gen = generator(ctx.seed)
    draws = 3 if ctx.quick else 8
    errors, untilted = [], []
    for _ in range(draws):
        eta = uniform(gen, -1.0, 1.0, 1, 1)
        for _, measure, log_h, lo, hi in one_d_carriers(gen):
            _, mean, _ = moments_1d(log_h, scalar(eta), lo, hi)
            errors.append(abs(scalar(autograd_mean(measure, eta)) - mean))
        d, n = 4, 9
        atoms, log_w, eta_d = randn(gen, n, d), randn(gen, n), randn(gen, 1, d)
        _, p = discrete_family(log_w.numpy(), atoms.numpy(), eta_d[0].numpy())
        errors.append(np.abs(autograd_mean(Empirical(atoms, log_w), eta_d)[0].numpy() - p @ atoms.numpy()).max())
        p0 = special.softmax(log_w.numpy())  # negative control: the mean under the untilted carrier
        untilted.append(np.abs(autograd_mean(Empirical(atoms, log_w), eta_d)[0].numpy() - p0 @ atoms.numpy()).max())
        eta1, eta2 = randn(gen, 1), uniform(gen, -0.5, 0.2, 1)
        lattice = TiltedLattice(LATTICE, eta1, eta2)
        s = LATTICE.numpy()
        _, p = discrete_family(s * scalar(eta1) + s**2 * scalar(eta2), s[:, None], eta.numpy()[0])
        errors.append(abs(scalar(autograd_mean(lattice, eta)) - p @ s))
    return compare(
        "A2", "identity", float(max(errors)), 1e-8, draws=draws * 5,
        negatives={"mean under the untilted carrier h (eta = 0)": float(max(untilted))},
    )


def gamma_log_z0(theta1: float, theta2: float) -> float:
    return float(special.gammaln(theta2 + 1) - (theta2 + 1) * math.log(-theta1))


def lattice_log_z0(theta1: float, theta2: float) -> float:
    s = LATTICE.numpy()
    return float(special.logsumexp(s * theta1 + s**2 * theta2))


def gaussian_log_z0(theta1: float, theta2: float) -> float:
    precision = -2 * theta2
    return 0.5 * theta1**2 / precision + 0.5 * math.log(2 * math.pi / precision)


@register_claim(
    "A4",
    method="quadrature / grid sums of h e^{x.eta} vs the closed-form tilted mean and the library; "
    "as printed: eq. (1) with eta1 + eta2 in place of eta1 + eta",
)
def check_a4(ctx: RunContext):
    gen = generator(ctx.seed)
    draws = 4 if ctx.quick else 10
    errors, printed = [], []
    for _ in range(draws):
        eta = scalar(uniform(gen, -1.0, 1.0, 1))
        eta_t = torch.tensor([[eta]], dtype=F64)
        # Gamma: shape eta2 + 1, rate -eta1; tilting keeps the shape and lowers the rate by eta.
        e1, e2 = scalar(uniform(gen, -3.0, -1.5, 1)), scalar(uniform(gen, -0.5, 1.0, 1))
        gamma = TiltedGamma(torch.tensor([e1], dtype=F64), torch.tensor([e2], dtype=F64))
        g, mean, _ = moments_1d(lambda x, e1=e1, e2=e2: gamma_log_pdf(x, e2 + 1, -e1), eta, 0, math.inf)
        cases = [(gamma, g, mean, (e2 + 1) / -(e1 + eta), gamma_log_z0, e1, e2)]
        # Lattice {-4..4} with u2 = x^2.
        e1, e2 = scalar(randn(gen, 1)), scalar(uniform(gen, -0.5, 0.2, 1))
        s = LATTICE.numpy()
        g, p = discrete_family(s * e1 + s**2 * e2 - lattice_log_z0(e1, e2), s[:, None], np.array([eta]))
        tilted = special.softmax(s * (e1 + eta) + s**2 * e2) @ s
        lattice = TiltedLattice(LATTICE, torch.tensor([e1], dtype=F64), torch.tensor([e2], dtype=F64))
        cases.append((lattice, g, p @ s, tilted, lattice_log_z0, e1, e2))
        # Gaussian with precision -2 eta2: mean (eta1 + eta) / precision.
        e1, e2 = scalar(randn(gen, 1)), -0.5 * scalar(uniform(gen, 0.5, 3.0, 1))
        gauss = TiltedGaussian(torch.tensor([e1], dtype=F64), torch.tensor([[e2]], dtype=F64))
        g, mean, _ = moments_1d(
            lambda x, e1=e1, e2=e2: normal_log_pdf(x, e1 / (-2 * e2), 1 / (-2 * e2)),
            eta,
            -math.inf,
            math.inf,
        )
        cases.append((gauss, g, mean, (e1 + eta) / (-2 * e2), gaussian_log_z0, e1, e2))
        for measure, g_ref, lhs, rhs, log_z0, e1, e2 in cases:
            errors += [
                abs(lhs - rhs),
                abs(scalar(measure.mean(eta_t)) - rhs),
                abs(scalar(measure.log_normalizer(eta_t)) - g_ref),
            ]
            printed.append(abs(log_z0(e1 + e2, e2) - log_z0(e1, e2) - g_ref))
    return compare(
        "A4",
        "identity",
        float(max(errors)),
        1e-8,
        as_printed_error=float(max(printed)),
        draws=draws * 3,
        notes="as printed, eq. (1) evaluates Z0(eta1 + eta2, eta2) / Z0(eta1, eta2), which does not depend on eta",
    )


@register_claim(
    "A5",
    method="scipy quad (1-D) and dblquad (2-D) of N(x; mu, Sigma) e^{x.eta}; autograd of G in 5-D",
)
def check_a5(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, inverse = [], []
    for _ in range(3 if ctx.quick else 8):
        mu, var, eta = scalar(randn(gen, 1)), scalar(uniform(gen, 0.3, 2.0, 1)), scalar(uniform(gen, -1, 1, 1))
        carrier = Gaussian(torch.tensor([mu], dtype=F64), torch.tensor([[var]], dtype=F64))
        g, mean, _ = moments_1d(lambda x, mu=mu, var=var: normal_log_pdf(x, mu, var), eta, -math.inf, math.inf)
        eta_t = torch.tensor([[eta]], dtype=F64)
        errors += [abs(scalar(carrier.log_normalizer(eta_t)) - g), abs(scalar(carrier.mean(eta_t)) - mean)]
    for _ in range(1 if ctx.quick else 2):
        mu, cov, eta = randn(gen, 2), wishart_spd(gen, dim=2), uniform(gen, -0.7, 0.7, 1, 2)
        half_width = 12 * math.sqrt(float(torch.linalg.eigvalsh(cov).max()))  # 12 standard deviations
        g = gaussian_log_partition_2d(mu.numpy(), cov.numpy(), eta[0].numpy(), half_width)
        errors.append(abs(scalar(Gaussian(mu, cov).log_normalizer(eta)) - g))
    for _ in range(10):
        mu, cov, eta = randn(gen, 3, 5), wishart_spd(gen, 3, dim=5), randn(gen, 3, 4, 5)
        carrier = Gaussian(mu, cov)
        explicit = mu.numpy()[:, None, :] + np.einsum("bij,bqj->bqi", cov.numpy(), eta.numpy())
        errors.append(np.abs(autograd_mean(carrier, eta).numpy() - explicit).max())
        errors.append(np.abs(carrier.mean(eta).numpy() - explicit).max())
        wrong = mu.numpy()[:, None, :] + np.linalg.solve(cov.numpy()[:, None], eta.numpy()[..., None])[..., 0]
        inverse.append(np.abs(carrier.mean(eta).numpy() - wrong).max())
    return compare(
        "A5", "identity", float(max(errors)), 1e-8, draws=len(errors),
        negatives={"grad G = mu + Sigma^-1 eta": float(max(inverse))},
    )


@register_claim(
    "A6",
    method="quadrature of G in 1-D; explicit numpy formula and autograd in 3-D; as printed: eq. (4) with "
    "grad log inside the sum (1-D, positive means)",
)
def check_a6(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, printed = [], []
    for _ in range(3 if ctx.quick else 8):
        means, var, w = uniform(gen, 0.2, 2.0, 4, 1), scalar(uniform(gen, 0.3, 1.5, 1)), uniform(gen, 0.1, 2.0, 4)
        eta = scalar(uniform(gen, -1, 1, 1))
        m, pi = means[:, 0].numpy(), w.numpy()
        mixture = GaussianMixture(means, torch.tensor([[var]], dtype=F64), weights=w)
        g, mean, _ = moments_1d(
            mixture_log_pdf(np.log(pi), m, np.full_like(m, var)),
            eta,
            -math.inf,
            math.inf,
        )
        eta_t = torch.tensor([[eta]], dtype=F64)
        r = special.softmax(np.log(pi) + m * eta)
        attention = r @ m
        errors += [
            abs(scalar(mixture.log_normalizer(eta_t)) - g),
            abs(scalar(mixture.mean(eta_t)) - mean),
            abs(var * eta + attention - mean),
        ]
        # Seed 000 eq. (4) as printed: Sigma eta + d/deta log(sum_n softmax_n mu_n).
        printed.append(abs(var * eta + (r @ m**2 - attention**2) / attention - mean))
    for _ in range(10):
        means, cov, w, eta = (
            randn(gen, 2, 6, 3),
            wishart_spd(gen, 2, dim=3),
            uniform(gen, 0.1, 2.0, 2, 6),
            randn(gen, 2, 5, 3),
        )
        mixture = GaussianMixture(means, cov, weights=w)
        logits = np.log(w.numpy())[:, None, :] + np.einsum("bnd,bqd->bqn", means.numpy(), eta.numpy())
        explicit = np.einsum("bij,bqj->bqi", cov.numpy(), eta.numpy()) + special.softmax(logits, -1) @ means.numpy()
        errors += [
            np.abs(mixture.mean(eta).numpy() - explicit).max(),
            np.abs(autograd_mean(mixture, eta).numpy() - explicit).max(),
        ]
    return compare("A6", "identity", float(max(errors)), 1e-8, as_printed_error=float(max(printed)), draws=len(errors))


@register_claim(
    "A7",
    method="exact G (log-sum-exp, checked by 1-D quadrature) minus G_LB over random draws; "
    "gradient vs numpy and autograd",
)
def check_a7(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, gaps = [], []
    for _ in range(5 if ctx.quick else 40):
        d = int(torch.randint(1, 4, (1,), generator=gen))
        means, cov, eta = (
            randn(gen, 5, d),
            wishart_spd(gen, 5, dim=d) * uniform(gen, 0.2, 3.0, 5, 1, 1),
            randn(gen, 7, d),
        )
        w = uniform(gen, 0.05, 1.0, 5)
        w = w / w.sum()
        mixture = GaussianMixture(means, cov, weights=w)
        gaps.append(mixture.jensen_gap(eta).numpy())
        explicit = (
            w.numpy()[:, None, None] * (means.numpy()[:, None, :] + np.einsum("nij,qj->nqi", cov.numpy(), eta.numpy()))
        ).sum(0)
        lb_eta = eta.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(mixture.lower_bound(lb_eta).sum(), lb_eta)
        errors += [
            np.abs(mixture.lower_bound_mean(eta).numpy() - explicit).max(),
            np.abs(auto.numpy() - explicit).max(),
        ]
        if d == 1:
            m, v = means[:, 0].numpy(), cov[:, 0, 0].numpy()
            g, _, _ = moments_1d(
                mixture_log_pdf(np.log(w.numpy()), m, v),
                scalar(eta[0]),
                -math.inf,
                math.inf,
            )
            errors.append(abs(scalar(mixture.log_normalizer(eta[:1])) - g))
    gaps = np.concatenate(gaps)
    violation = max(0.0, -float(gaps.min()))
    reversed_violation = max(0.0, float(gaps.max()))  # negative control: G <= G_LB, the bound reversed
    return compare(
        "A7",
        "inequality",
        max(float(max(errors)), violation),
        1e-8,
        draws=len(gaps),
        min_gap=float(gaps.min()),
        mean_gap=float(gaps.mean()),
        max_gap=float(gaps.max()),
        negatives={"reversed bound G <= G_LB": reversed_violation},
        measure="largest gradient error or violation of G_LB <= G",
    )
