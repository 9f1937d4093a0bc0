"""Hidden-unit priors: K(t) and kappa_n against autograd, quadrature and sampling (claim D3)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import grad

from expattn.core.energy import PRIORS, HiddenPrior, make_prior, register_prior
from expattn.core.rbm import log_mgf_numeric


def draw_params(name: str, gen: torch.Generator) -> dict[str, float]:
    """Random, valid parameters for each registered prior."""
    u = torch.rand(2, generator=gen, dtype=torch.float64).tolist()
    return {
        "gaussian": {"mean": 2 * u[0] - 1, "var": 0.3 + 2 * u[1]},
        "poisson": {"rate": 0.3 + 3 * u[0]},
        "bernoulli": {"p": 0.05 + 0.9 * u[0]},
        "spin": {"p": 0.05 + 0.9 * u[0]},
        "exponential": {"rate": 0.5 + 2 * u[0]},
        "laplace": {"scale": 0.3 + 1.5 * u[0]},
        "constant": {"c": 4 * u[0] - 2},
    }[name]


def inner_points(prior: HiddenPrior, fraction: float, count: int) -> torch.Tensor:
    """``count`` points spread over ``fraction`` of the CGF's domain (capped at |t| <= 2)."""
    lo, hi = (max(b, -2.0) if b < 0 else min(b, 2.0) for b in prior.domain)
    return torch.linspace(fraction * lo, fraction * hi, count, dtype=torch.float64)


ALL = sorted(PRIORS)


@pytest.mark.parametrize("name", ALL)
def test_cumulants_are_derivatives_of_cgf(name, gen):
    prior = make_prior(name, **draw_params(name, gen))
    derivative = prior.cgf
    zero = torch.zeros((), dtype=torch.float64)
    for n in range(1, 8):
        derivative = grad(derivative)
        expected = derivative(zero).item()
        # Autograd of a closed form in float64: only rounding separates the two (kappa_7 of the
        # Laplace/exponential priors reaches ~1e4, hence the relative part).
        assert prior.cumulant(n) == pytest.approx(expected, rel=1e-10, abs=1e-12), n


@pytest.mark.parametrize("name", ALL)
def test_cgf_matches_numerical_integral(name, gen):
    prior = make_prior(name, **draw_params(name, gen))
    t = inner_points(prior, 0.9, 9)
    numeric = torch.tensor([log_mgf_numeric(prior, x) for x in t.tolist()], dtype=torch.float64)
    # quad runs at epsrel 1e-12; near the domain edge the integrand's tail is slow, so 1e-8 absolute.
    torch.testing.assert_close(prior.cgf(t), numeric, rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", ALL)
def test_cumulants_and_cgf_match_samples(name, gen):
    prior = make_prior(name, **draw_params(name, gen))
    n = 200_000
    h = prior.sample(n, gen)
    k1, k2, k4 = prior.cumulant(1), prior.cumulant(2), prior.cumulant(4)
    # Five standard errors: a false alarm has probability ~6e-7 per comparison.
    assert abs(h.mean().item() - k1) <= 5 * math.sqrt(k2 / n) + 1e-12
    var_se = math.sqrt((k4 + 2 * k2**2) / n)
    assert abs(h.var().item() - k2) <= 5 * var_se + 1e-12
    # E[e^{th}] at t where E[e^{2th}] is finite (2t inside the domain): standard error of the mean.
    for t in inner_points(prior, 0.4, 3).tolist():
        e = torch.exp(t * h)
        se = e.std().item() / math.sqrt(n)
        mgf = math.exp(prior.cgf(torch.tensor(t, dtype=torch.float64)).item())
        assert abs(e.mean().item() - mgf) <= 5 * se + 1e-12, t


def test_bernoulli_cumulants_known_polynomials(gen):
    p = torch.rand((), generator=gen, dtype=torch.float64).item()
    prior = make_prior("bernoulli", p=p)
    q = 1 - p
    # Textbook forms, written out independently of the recursion.
    expected = [p, p * q, p * q * (1 - 2 * p), p * q * (1 - 6 * p * q)]
    for n, value in enumerate(expected, start=1):
        assert prior.cumulant(n) == pytest.approx(value, rel=1e-12, abs=1e-15)
    spin = make_prior("spin", p=p)
    assert spin.cumulant(2) == pytest.approx(4 * p * q, rel=1e-12)


@pytest.mark.parametrize(
    ("name", "params", "argument"),
    [
        ("poisson", {"rate": 0.0}, "rate"),
        ("poisson", {"rate": -1.0}, "rate"),
        ("exponential", {"rate": float("nan")}, "rate"),
        ("bernoulli", {"p": 1.5}, "p"),
        ("spin", {"p": -0.1}, "p"),
        ("gaussian", {"var": 0.0}, "var"),
        ("gaussian", {"mean": float("inf")}, "mean"),
        ("laplace", {"scale": -2.0}, "scale"),
        ("constant", {"c": float("nan")}, "c"),
    ],
)
def test_bad_parameters_name_the_argument(name, params, argument):
    with pytest.raises(ValueError, match=rf"^{argument} must"):
        make_prior(name, **params)


@pytest.mark.parametrize(
    ("name", "params", "t"), [("exponential", {"rate": 2.0}, 2.0), ("laplace", {"scale": 0.5}, -2.5)]
)
def test_t_outside_domain_raises(name, params, t):
    prior = make_prior(name, **params)
    with pytest.raises(ValueError, match="t must lie in the domain"):
        prior.cgf(torch.tensor([0.0, t], dtype=torch.float64))


def test_registry_and_argument_errors():
    with pytest.raises(ValueError, match="name must be one of"):
        make_prior("cauchy")
    with pytest.raises(ValueError, match="already registered"):
        register_prior("poisson")(HiddenPrior)
    prior = make_prior("poisson", rate=1.0)
    with pytest.raises(ValueError, match="n must be"):
        prior.cumulant(0)
    with pytest.raises(ValueError, match="n must be"):
        prior.sample(0, torch.Generator())
    with pytest.raises(ValueError, match="t must be finite"):
        prior.cgf(torch.tensor([float("nan")], dtype=torch.float64))
    with pytest.raises(TypeError, match=r"t must be a torch\.Tensor"):
        prior.cgf(0.5)
