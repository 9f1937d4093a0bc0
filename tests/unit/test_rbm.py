"""RBM effective energies (D3-D5) against brute-force marginals, quadrature and autograd."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.func import jacfwd

from expattn.core.energy import make_prior
from expattn.core.rbm import (
    classical_hopfield_energy,
    coupling_tensor,
    cumulant_series_energy,
    effective_energy,
    exponential_interaction_energy,
    marginal_energy_numeric,
)

PRIOR_PARAMS = {
    "gaussian": {"mean": 0.2, "var": 1.3},
    "poisson": {"rate": 0.8},
    "bernoulli": {"p": 0.3},
    "spin": {"p": 0.6},
    "exponential": {"rate": 2.0},
    "laplace": {"scale": 0.5},
    "constant": {"c": 0.7},
}


def binary_visible(gen, batch, visible):
    return (torch.rand(batch, visible, generator=gen) < 0.5).to(torch.float64)


def small_weights(gen, visible, hidden, scale):
    """Weights small enough that every field |t| <= visible * scale stays in every CGF's domain."""
    return scale * (2 * torch.rand(visible, hidden, generator=gen, dtype=torch.float64) - 1)


@pytest.mark.parametrize("name", sorted(PRIOR_PARAMS))
def test_cgf_energy_equals_numerical_marginal(name, gen):
    prior = make_prior(name, **PRIOR_PARAMS[name])
    visible, hidden = 5, 3
    w = small_weights(gen, visible, hidden, 0.3)  # |t| <= 1.5 < 2 = exponential rate
    a = torch.randn(visible, generator=gen, dtype=torch.float64)
    v = binary_visible(gen, 6, visible)
    # Quadrature at epsrel 1e-12 per hidden unit, three units: 1e-9 absolute leaves headroom.
    torch.testing.assert_close(
        effective_energy(v, w, prior, a), marginal_energy_numeric(v, w, prior, a), rtol=0, atol=1e-9
    )
    # Gaussian visible units (precision term) change nothing in the hidden integral.
    lam = 0.5 + torch.rand(visible, generator=gen, dtype=torch.float64)
    vg = 0.4 * torch.randn(4, visible, generator=gen, dtype=torch.float64)
    torch.testing.assert_close(
        effective_energy(vg, w, prior, a, lam), marginal_energy_numeric(vg, w, prior, a, lam), rtol=0, atol=1e-9
    )


@pytest.mark.parametrize("name", ["bernoulli", "spin"])
def test_visible_marginal_by_joint_enumeration(name, gen):
    """p(v) from summing exp(-E(v, h)) over every (v, h) pair equals exp(-E(v)) / sum."""
    visible, hidden = 4, 3
    prior = make_prior(name, p=0.35)
    w = torch.randn(visible, hidden, generator=gen, dtype=torch.float64)
    a = torch.randn(visible, generator=gen, dtype=torch.float64)
    states = torch.tensor(list(itertools.product([0.0, 1.0], repeat=visible)), dtype=torch.float64)
    hidden_states = torch.tensor(list(itertools.product(prior.support, repeat=hidden)), dtype=torch.float64)
    log_q = torch.tensor(prior.log_prob(hidden_states.numpy()), dtype=torch.float64).sum(-1)  # (2^M,)
    joint = (states @ a).unsqueeze(-1) + states @ w @ hidden_states.T + log_q  # (2^D, 2^M): -E(v, h)
    brute = torch.log_softmax(torch.logsumexp(joint, -1), 0)
    effective = torch.log_softmax(-effective_energy(states, w, prior, a), 0)
    torch.testing.assert_close(effective, brute, rtol=0, atol=1e-12)  # float64 rounding of a 16x8 sum


@pytest.mark.parametrize("name", sorted(PRIOR_PARAMS))
def test_cumulant_series_converges(name, gen):
    prior = make_prior(name, **PRIOR_PARAMS[name])
    visible, hidden = 4, 3
    w = small_weights(gen, visible, hidden, 0.1)  # |t| <= 0.4: inside every radius of convergence
    a = torch.randn(visible, generator=gen, dtype=torch.float64)
    v = binary_visible(gen, 8, visible)
    exact = effective_energy(v, w, prior, a)
    errors = [(cumulant_series_energy(v, w, prior, a, n) - exact).abs().max().item() for n in range(1, 13)]
    # Every term beyond order n is O(|t|^{n+1}); at |t| <= 0.4 twelve orders leave < 1e-5 even for
    # the (n-1)!-growing cumulants of the exponential and Laplace priors.
    assert errors[-1] < 1e-5
    assert errors[-1] < errors[0] or errors[0] < 1e-14
    if name == "gaussian":
        assert errors[1] < 1e-14  # a quadratic CGF: exact from order 2
    if name == "constant":
        assert errors[0] < 1e-14  # only kappa_1


@pytest.mark.parametrize("name", sorted(PRIOR_PARAMS))
def test_couplings_are_derivatives_of_energy(name, gen):
    prior = make_prior(name, **PRIOR_PARAMS[name])
    visible, hidden = 3, 2
    w = small_weights(gen, visible, hidden, 0.3)
    zero_bias = torch.zeros(visible, dtype=torch.float64)

    def energy(x):
        return effective_energy(x.unsqueeze(0), w, prior, zero_bias)[0]

    origin = torch.zeros(visible, dtype=torch.float64)
    derivative = energy
    for n in range(1, 5):
        derivative = jacfwd(derivative)
        # d^n E / dv^n at 0 = -J^(n): forward-mode autodiff, exact up to float64 rounding.
        torch.testing.assert_close(-derivative(origin), coupling_tensor(w, prior, n), rtol=1e-10, atol=1e-12)


def test_gaussian_hidden_units_give_classical_hopfield(gen):
    visible, hidden = 6, 4
    w = torch.randn(visible, hidden, generator=gen, dtype=torch.float64)
    a = torch.randn(visible, generator=gen, dtype=torch.float64)
    v = 2 * binary_visible(gen, 10, visible) - 1
    explicit = -(v @ a) - 0.5 * torch.einsum("bi,ij,bj->b", v, w @ w.T, v)  # written out independently
    torch.testing.assert_close(effective_energy(v, w, make_prior("gaussian"), a), explicit, rtol=0, atol=1e-12)
    torch.testing.assert_close(classical_hopfield_energy(v, w, a), explicit, rtol=0, atol=1e-12)


def test_poisson_hidden_units_give_exponential_interaction(gen):
    visible, hidden = 6, 4
    w = 0.5 * torch.randn(visible, hidden, generator=gen, dtype=torch.float64)
    a = torch.randn(visible, generator=gen, dtype=torch.float64)
    v = binary_visible(gen, 10, visible)
    explicit = -(v @ a) - sum(math.e ** (v @ w[:, mu]) for mu in range(hidden))
    got = effective_energy(v, w, make_prior("poisson", rate=1.0), a)
    torch.testing.assert_close(got, explicit + hidden, rtol=0, atol=1e-12)  # constant: K(t) = e^t - 1
    torch.testing.assert_close(exponential_interaction_energy(v, w, a), explicit, rtol=0, atol=1e-12)


def test_bernoulli_couples_all_orders_and_exponential_laplace_are_logarithmic(gen):
    visible, hidden = 4, 3
    w = small_weights(gen, visible, hidden, 0.2)
    a = torch.randn(visible, generator=gen, dtype=torch.float64)
    v = binary_visible(gen, 8, visible)
    bern = make_prior("bernoulli", p=0.3)
    assert all(abs(bern.cumulant(n)) > 1e-4 for n in range(1, 9))
    assert all(coupling_tensor(w, bern, n).abs().max() > 0 for n in range(1, 5))
    t = v @ w
    for prior, log_term in [
        (make_prior("exponential", rate=2.0), torch.log(1 - t / 2.0)),
        (make_prior("laplace", scale=0.5), torch.log(1 - (0.5 * t) ** 2)),
    ]:
        torch.testing.assert_close(effective_energy(v, w, prior, a), -(v @ a) + log_term.sum(-1), rtol=0, atol=1e-12)


def test_bad_inputs(gen):
    w = torch.randn(3, 2, generator=gen, dtype=torch.float64)
    a = torch.zeros(3, dtype=torch.float64)
    v = binary_visible(gen, 2, 3)
    poisson = make_prior("poisson")
    with pytest.raises(ValueError, match="weights must have shape"):
        effective_energy(v, w.T, poisson, a)
    with pytest.raises(ValueError, match="priors must be one HiddenPrior"):
        effective_energy(v, w, [poisson], a)
    with pytest.raises(ValueError, match="visible_bias must have shape"):
        effective_energy(v, w, poisson, a[:2])
    with pytest.raises(ValueError, match="t must lie in the domain"):
        effective_energy(v, 10 * w.abs(), make_prior("exponential", rate=1.0), a)
    with pytest.raises(ValueError, match="order must be"):
        cumulant_series_energy(v, w, poisson, a, 0)
    with pytest.raises(ValueError, match="v must be finite"):
        effective_energy(torch.full((1, 3), float("nan"), dtype=torch.float64), w, poisson, a)
