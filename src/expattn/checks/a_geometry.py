"""Checks of the family's geometry: Fisher (A8), Bregman = KL (A9), conjugate (A10), affine map (A11).

Each runs over every carrier of the library (atoms, Gaussian, Gaussian mixture, tilted Gaussian,
Gamma and lattice) in three dimensions, float64, against references that do not use the library's
closed forms: ``torch.autograd.functional.hessian``/``jacobian``, numpy moment formulas,
``torch.distributions`` KL divergences, scipy quadrature and ``scipy.optimize``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import special
from torch.distributions import Gamma, MultivariateNormal, kl_divergence

from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.a_families import LATTICE, uniform
from expattn.checks.references import conjugate_by_optimiser, kl_1d, mixture_log_pdf
from expattn.checks.spd import wishart_spd
from expattn.checks.tools import compare, generator, randn
from expattn.core.empirical import Empirical
from expattn.core.gaussian import Gaussian
from expattn.core.measure import Measure
from expattn.core.mixture import GaussianMixture
from expattn.core.tilted import TiltedGamma, TiltedGaussian, TiltedLattice

DIM = 3


def carriers(gen: torch.Generator) -> list[tuple[str, Measure, torch.Tensor]]:
    """One random instance of every carrier with a natural parameter ``(1, DIM)`` inside its domain."""
    d = DIM
    return [
        ("empirical", Empirical(randn(gen, 8, d), randn(gen, 8)), randn(gen, 1, d)),
        ("gaussian", Gaussian(randn(gen, d), wishart_spd(gen, dim=d)), randn(gen, 1, d)),
        (
            "mixture",
            GaussianMixture(randn(gen, 4, d), 0.5 * wishart_spd(gen, 4, dim=d), weights=uniform(gen, 0.1, 1, 4)),
            randn(gen, 1, d, scale=0.5),
        ),
        ("tilted_gaussian", TiltedGaussian(randn(gen, d), -0.5 * wishart_spd(gen, dim=d)), randn(gen, 1, d)),
        ("tilted_gamma", TiltedGamma(uniform(gen, -3, -1.5, d), uniform(gen, -0.5, 1, d)), uniform(gen, -1, 1, 1, d)),
        ("tilted_lattice", TiltedLattice(LATTICE, randn(gen, d), uniform(gen, -0.5, 0.2, d)), randn(gen, 1, d)),
    ]


def reference_moments(name: str, measure, eta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and covariance of $p(\\cdot|\\eta)$ written out in numpy from the carrier's parameters."""
    if name == "empirical":
        x = measure.atoms.numpy()
        p = special.softmax(measure.log_weights.numpy() + x @ eta)
        mean = p @ x
        return mean, (x - mean).T @ (p[:, None] * (x - mean))
    if name == "gaussian":
        cov = measure.covariance.numpy()
        return measure.loc.numpy() + cov @ eta, cov
    if name == "mixture":
        mu, covs = measure.means.numpy(), measure.covariance.numpy()
        logits = measure.log_weights.numpy() + mu @ eta + 0.5 * np.einsum("i,nij,j->n", eta, covs, eta)
        r = special.softmax(logits)
        means = mu + covs @ eta
        mean = r @ means
        second = np.einsum("n,nij->ij", r, covs + np.einsum("ni,nj->nij", means, means))
        return mean, second - np.outer(mean, mean)
    if name == "tilted_gaussian":
        cov = np.linalg.inv(-2 * measure.eta2.numpy())
        return cov @ (measure.eta1.numpy() + eta), cov
    if name == "tilted_gamma":
        shape, rate = measure.eta2.numpy() + 1, -(measure.eta1.numpy() + eta)
        return shape / rate, np.diag(shape / rate**2)
    s = LATTICE.numpy()
    p = special.softmax(np.outer(measure.eta1.numpy() + eta, s) + np.outer(measure.eta2.numpy(), s**2), axis=-1)
    mean = p @ s
    return mean, np.diag(p @ s**2 - mean**2)


def single_hessian(measure: Measure, eta: torch.Tensor) -> torch.Tensor:
    """``(D, D)`` Hessian of $G$ at one natural parameter ``(1, D)`` by ``torch.autograd.functional.hessian``."""
    return torch.autograd.functional.hessian(lambda e: measure.log_normalizer(e.unsqueeze(0)).sum(), eta[0])


@register_claim(
    "A8",
    method="torch.autograd.functional.hessian of G vs the library's fisher and numpy covariances, six carriers; "
    "as printed: E_p(u u^T)",
)
def check_a8(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, printed = [], []
    for _ in range(2 if ctx.quick else 6):
        for name, measure, eta in carriers(gen):
            hess = single_hessian(measure, eta).numpy()
            mean, cov = reference_moments(name, measure, eta[0].numpy())
            errors += [np.abs(measure.fisher(eta)[0].numpy() - hess).max(), np.abs(cov - hess).max()]
            printed.append(np.abs(cov + np.outer(mean, mean) - hess).max())
    return compare("A8", "identity", float(max(errors)), 1e-8, as_printed_error=float(max(printed)), draws=len(printed))


def reference_kl(name: str, measure, a: np.ndarray, b: np.ndarray) -> float:
    r"""$\mathrm{KL}(p(\cdot|a)\,\|\,p(\cdot|b))$ without the log-normalizer: distributions or direct sums."""
    if name in ("gaussian", "tilted_gaussian"):
        (ma, cov), (mb, _) = reference_moments(name, measure, a), reference_moments(name, measure, b)
        cov = torch.from_numpy(cov)
        pa, pb = MultivariateNormal(torch.from_numpy(ma), cov), MultivariateNormal(torch.from_numpy(mb), cov)
        return float(kl_divergence(pa, pb))
    if name == "tilted_gamma":
        shape = torch.from_numpy(measure.eta2.numpy() + 1)
        rate_a, rate_b = (torch.from_numpy(-(measure.eta1.numpy() + e)) for e in (a, b))
        return float(kl_divergence(Gamma(shape, rate_a), Gamma(shape, rate_b)).sum())
    if name == "empirical":
        x, log_w = measure.atoms.numpy(), measure.log_weights.numpy()
        log_pa, log_pb = (special.log_softmax(log_w + x @ e) for e in (a, b))
        return float(np.exp(log_pa) @ (log_pa - log_pb))
    s = LATTICE.numpy()
    log_pa, log_pb = (
        special.log_softmax(np.outer(measure.eta1.numpy() + e, s) + np.outer(measure.eta2.numpy(), s**2), axis=-1)
        for e in (a, b)
    )
    return float((np.exp(log_pa) * (log_pa - log_pb)).sum())


@register_claim(
    "A9",
    method="library Bregman vs torch.distributions KL (Gaussian, Gamma), direct sums (atoms, lattice) and "
    "1-D quadrature (mixture); as printed: KL(p(.|a) || p(.|b))",
)
def check_a9(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, printed = [], []
    for _ in range(2 if ctx.quick else 6):
        for name, measure, a in carriers(gen):
            if name == "mixture":
                continue
            b = a + randn(gen, 1, DIM, scale=0.4) if name != "tilted_gamma" else a * uniform(gen, 0.3, 1.0, 1, DIM)
            bregman = float(measure.bregman(a, b))
            kl_ba = reference_kl(name, measure, b[0].numpy(), a[0].numpy())
            errors += [abs(bregman - kl_ba), abs(float(measure.kl(b, a)) - kl_ba)]
            printed.append(abs(bregman - reference_kl(name, measure, a[0].numpy(), b[0].numpy())))
        means, variances, w = randn(gen, 3, 1), uniform(gen, 0.2, 1.5, 3, 1, 1), uniform(gen, 0.1, 1.0, 3)
        mixture = GaussianMixture(means, variances, weights=w)
        a, b = uniform(gen, -1, 1, 1, 1), uniform(gen, -1, 1, 1, 1)
        log_h = mixture_log_pdf(np.log(w.numpy()), means[:, 0].numpy(), variances[:, 0, 0].numpy())
        kl_ba = kl_1d(log_h, float(b), float(a), -math.inf, math.inf)
        errors.append(abs(float(mixture.bregman(a, b)) - kl_ba))
        printed.append(abs(float(mixture.bregman(a, b)) - kl_1d(log_h, float(a), float(b), -math.inf, math.inf)))
    return compare("A9", "identity", float(max(errors)), 1e-8, as_printed_error=float(max(printed)), draws=len(errors))


def objective(measure: Measure):
    """``eta -> (G(eta), grad G(eta))`` on numpy vectors, for scipy."""

    def value_and_grad(eta: np.ndarray) -> tuple[float, np.ndarray]:
        e = torch.from_numpy(eta).reshape(1, -1).requires_grad_(True)
        g = measure.log_normalizer(e).sum()
        (grad,) = torch.autograd.grad(g, e)
        return float(g.detach()), grad[0].numpy()

    return value_and_grad


@register_claim(
    "A10",
    method="scipy.optimize (BFGS; L-BFGS-B inside the Gamma domain) vs the library's conjugate (Newton or "
    "closed form) and its entropy and E log h, five carriers",
)
def check_a10(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, shannon, flipped = [], [], []
    for _ in range(1 if ctx.quick else 2):
        for name, measure, eta in carriers(gen):
            m, _ = reference_moments(name, measure, eta[0].numpy())
            bounds = None
            if name == "tilted_gamma":
                bounds = [(None, float(-e1) - 1e-9) for e1 in measure.eta1]
            value, _ = conjugate_by_optimiser(objective(measure), m, np.zeros(DIM), bounds)
            lib_value, lib_eta = measure.conjugate(torch.from_numpy(m).reshape(1, -1))
            residual = np.abs(measure.mean(lib_eta)[0].numpy() - m).max()  # grad G(eta*) = m
            errors += [abs(float(lib_value) - value), residual]
            if name != "mixture":  # its entropy is a Monte Carlo estimate
                offset = measure.entropy(lib_eta) + measure.expected_log_base(lib_eta)
                errors.append(abs(value + float(offset.detach())))
        atoms, eta = randn(gen, 8, DIM), randn(gen, 1, DIM)
        unit = Empirical(atoms)
        p = special.softmax(atoms.numpy() @ eta[0].numpy())
        value, _ = conjugate_by_optimiser(objective(unit), p @ atoms.numpy(), np.zeros(DIM))
        shannon.append(abs(value - float(p @ np.log(p))))
        flipped.append(abs(value + float(p @ np.log(p))))  # negative control: plus the Shannon entropy
    error = max(max(errors), max(shannon))
    return compare(
        "A10", "identity", float(error), 1e-7, draws=len(errors), shannon_error=float(max(shannon)),
        negatives={"G* = +H(attention weights) for unit atoms": float(max(flipped))},
    )


@register_claim(
    "A11",
    method="torch.autograd.functional.jacobian of the library mean vs its fisher (six carriers); Gaussian "
    "conjugate vs numpy solve; atoms Sigma^-1 h_j vs numpy softmax",
)
def check_a11(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, orders, unmatched = [], [], []
    for _ in range(2 if ctx.quick else 6):
        for _, measure, eta in carriers(gen):
            jac = torch.autograd.functional.jacobian(lambda e, m=measure: m.mean(e.unsqueeze(0))[0], eta[0])
            errors.append((jac - measure.fisher(eta)[0]).abs().max().item())
        # Linearisation error of the attention map shrinks as |delta|^2 (second order).
        atoms, eta, delta = Empirical(randn(gen, 8, DIM)), randn(gen, 1, DIM), randn(gen, 1, DIM, scale=0.05)
        fisher = atoms.fisher(eta)[0]
        residuals = [
            (atoms.mean(eta + t * delta) - atoms.mean(eta) - t * delta @ fisher.T).norm().item() for t in (1.0, 0.5)
        ]
        orders.append(math.log2(residuals[0] / residuals[1]))
        # Gaussian hidden states: key Sigma^-1 h_j, weights softmax(h_i^T Sigma^-1 h_j).
        sigma, states = wishart_spd(gen, dim=DIM), randn(gen, 6, DIM)
        gaussian = Gaussian(torch.zeros(DIM, dtype=torch.float64), sigma)
        _, keys = gaussian.conjugate(states)
        keys_ref = np.linalg.solve(sigma.numpy(), states.numpy().T).T
        errors.append(np.abs(keys.numpy() - keys_ref).max())
        unmatched.append(np.abs(keys.numpy() - states.numpy() @ sigma.numpy()).max())  # Sigma h_j, not Sigma^-1 h_j
        weights = Empirical(keys).probs(states).numpy()
        errors.append(np.abs(weights - special.softmax(states.numpy() @ keys_ref.T, axis=-1)).max())
        step = randn(gen, 6, DIM)
        affine = gaussian.mean(states + step) - gaussian.mean(states) - step @ gaussian.fisher(states)[0].T
        errors.append(affine.abs().max().item())
    return compare(
        "A11",
        "identity+empirical",
        float(max(errors)),
        1e-9,
        draws=len(errors),
        min_linearisation_order=min(orders),
        max_linearisation_order=max(orders),
        notes="the empirical part (W_q^T W_k vs Sigma^-1 on trained models) is E4",
        negatives={"matched key Sigma h_j": float(max(unmatched))},
    )
