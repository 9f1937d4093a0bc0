r"""Hidden-unit priors of an RBM and their cumulant generating functions (seed 004 §2, claim D3).

A prior $q(h) \propto e^{b(h)}$ on one hidden unit enters the visible effective energy only through

$$K(t) = \log E_q[e^{t h}] = \sum_{n \ge 1} \kappa_n \frac{t^n}{n!},$$

its cumulant generating function (CGF), defined on an open interval ``domain`` that contains 0.
Every prior here gives $K$ exactly, $\kappa_n$ in closed form, its log-density (or mass) for
numerical marginalisation, and samples. Priors live in a registry: ``make_prior(name, **params)``
builds one, ``register_prior(name)`` adds one.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import finite_number, positive_int
from expattn.core.validate import as_tensor, check_finite


def _probability(name: str, value: float) -> float:
    if not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must lie in [0, 1], got {value!r}")
    return float(value)


class HiddenPrior(ABC):
    r"""Base class of a one-dimensional hidden-unit prior $q(h)$.

    Attributes:
        domain: open interval ``(lo, hi)`` on which $K(t) < \infty$ (``-inf``/``inf`` allowed).
        support: interval ``(lo, hi)`` holding the values of $h$.
        discrete: True if $h$ takes integer-spaced values (``atoms`` lists them).
    """

    name = "prior"
    domain: tuple[float, float] = (-math.inf, math.inf)
    support: tuple[float, float] = (-math.inf, math.inf)
    discrete = False

    def check_t(self, t: Tensor) -> Tensor:
        """Validate the CGF argument: a finite floating tensor inside ``domain``."""
        as_tensor("t", t)
        check_finite("t", t)
        lo, hi = self.domain
        outside = (t <= lo) | (t >= hi)
        if outside.any():
            bad = t[outside].flatten()[0].item()
            raise ValueError(f"t must lie in the domain ({lo}, {hi}) of K for {self!r}, got t = {bad}")
        return t

    def cgf(self, t: Float[Tensor, "*shape"]) -> Float[Tensor, "*shape"]:
        r"""$K(t) = \log E_q[e^{th}]$, elementwise; ``ValueError`` naming ``t`` outside ``domain``."""
        return self._cgf(self.check_t(t))

    @abstractmethod
    def _cgf(self, t: Tensor) -> Tensor:
        """$K(t)$ on an already validated ``t``."""

    def cumulant(self, n: int) -> float:
        r"""$\kappa_n = K^{(n)}(0)$ in closed form, for an integer ``n >= 1``."""
        positive_int("n", n)
        return self._cumulant(n)

    @abstractmethod
    def _cumulant(self, n: int) -> float:
        r"""$\kappa_n$ for a validated ``n``."""

    @abstractmethod
    def log_prob(self, h: Float[np.ndarray, "*shape"]) -> Float[np.ndarray, "*shape"]:
        """Log-density (continuous) or log-mass (discrete) of $q$ at ``h`` (numpy, float64)."""

    def atoms(self, t: float) -> np.ndarray:
        """Support points that carry all but a negligible part of $q(h) e^{th}$ (discrete only)."""
        raise TypeError(f"{self!r} is not discrete: it has no atoms")

    def sample(self, n: int, generator: torch.Generator) -> Float[Tensor, " n"]:
        """``n`` independent float64 draws of $h \\sim q$."""
        positive_int("n", n)
        return self._sample(n, generator)

    @abstractmethod
    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws for a validated ``n``."""

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in vars(self).items() if k not in ("domain", "support"))
        return f"{self.name}({params})"


PRIORS: dict[str, type[HiddenPrior]] = {}


def register_prior(name: str) -> Callable[[type[HiddenPrior]], type[HiddenPrior]]:
    """Class decorator: register a ``HiddenPrior`` subclass under ``name``."""

    def decorate(cls: type[HiddenPrior]) -> type[HiddenPrior]:
        if name in PRIORS:
            raise ValueError(f"a hidden prior named {name!r} is already registered")
        cls.name = name
        PRIORS[name] = cls
        return cls

    return decorate


def make_prior(name: str, **params: float) -> HiddenPrior:
    """Build the registered prior ``name`` with its parameters (``make_prior("poisson", rate=1)``)."""
    if name not in PRIORS:
        raise ValueError(f"name must be one of {sorted(PRIORS)}, got {name!r}")
    return PRIORS[name](**params)


@register_prior("gaussian")
class GaussianPrior(HiddenPrior):
    r"""$h \sim N(m, s^2)$: $K(t) = m t + s^2 t^2 / 2$; $\kappa_1 = m$, $\kappa_2 = s^2$, rest 0 (D4)."""

    def __init__(self, mean: float = 0.0, var: float = 1.0) -> None:
        self.mean = finite_number("mean", mean)
        self.var = finite_number("var", var, above=0)

    def _cgf(self, t: Tensor) -> Tensor:
        return self.mean * t + 0.5 * self.var * t**2

    def _cumulant(self, n: int) -> float:
        return {1: self.mean, 2: self.var}.get(n, 0.0)

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        return -0.5 * (h - self.mean) ** 2 / self.var - 0.5 * math.log(2 * math.pi * self.var)

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        return self.mean + math.sqrt(self.var) * torch.randn(n, generator=generator, dtype=torch.float64)


@register_prior("poisson")
class PoissonPrior(HiddenPrior):
    r"""$h \sim \mathrm{Poisson}(\lambda)$: $K(t) = \lambda(e^t - 1)$; $\kappa_n = \lambda$ for all n (D5)."""

    support = (0.0, math.inf)
    discrete = True

    def __init__(self, rate: float = 1.0) -> None:
        self.rate = finite_number("rate", rate, above=0)

    def _cgf(self, t: Tensor) -> Tensor:
        return self.rate * torch.expm1(t)

    def _cumulant(self, n: int) -> float:
        return self.rate

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        from scipy.special import gammaln

        return h * math.log(self.rate) - self.rate - gammaln(h + 1.0)

    def atoms(self, t: float) -> np.ndarray:
        # Tilted by e^{th}, the terms are Poisson(rate e^t) up to a factor: cover 40 sd past the mean.
        tilted = self.rate * math.exp(t)
        return np.arange(0.0, math.ceil(tilted + 40.0 * math.sqrt(tilted) + 40.0))

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        return torch.poisson(torch.full((n,), self.rate, dtype=torch.float64), generator=generator)


def bernoulli_cumulant(n: int, p: float) -> float:
    r"""$\kappa_n$ of Bernoulli(p) on {0, 1}: $P_n(p)$ with $P_1(s) = s$, $P_{n+1}(s) = s(1-s)P_n'(s)$.

    $K'(t) = \sigma(t + \operatorname{logit} p)$ and $\sigma' = \sigma(1 - \sigma)$, so every derivative
    of $K$ is a polynomial in $\sigma$, evaluated at $\sigma = p$ when $t = 0$.
    """
    poly = np.polynomial.Polynomial([0.0, 1.0])
    logistic_slope = np.polynomial.Polynomial([0.0, 1.0, -1.0])
    for _ in range(n - 1):
        poly = logistic_slope * poly.deriv()
    return float(poly(p))


@register_prior("bernoulli")
class BernoulliPrior(HiddenPrior):
    r"""$h \in \{0,1\}$, $P(h=1) = p$: $K(t) = \log(1 - p + p e^t)$; cumulants of all orders."""

    support = (0.0, 1.0)
    discrete = True

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability("p", p)

    def _cgf(self, t: Tensor) -> Tensor:
        return torch.log1p(self.p * torch.expm1(t))

    def _cumulant(self, n: int) -> float:
        return bernoulli_cumulant(n, self.p)

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.where(h > 0.5, np.log(self.p), np.log1p(-self.p))

    def atoms(self, t: float) -> np.ndarray:
        return np.array([0.0, 1.0])

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        return (torch.rand(n, generator=generator, dtype=torch.float64) < self.p).to(torch.float64)


@register_prior("spin")
class SpinPrior(HiddenPrior):
    r"""$h \in \{-1, 1\}$, $P(h=1) = p$ ($h = 2b - 1$, $b$ Bernoulli): $K(t) = -t + \log(1 - p + p e^{2t})$.

    Cumulants: $\kappa_1 = 2p - 1$, $\kappa_n = 2^n \kappa_n^{\mathrm{Bernoulli}(p)}$ for $n \ge 2$.
    """

    support = (-1.0, 1.0)
    discrete = True

    def __init__(self, p: float = 0.5) -> None:
        self.p = _probability("p", p)

    def _cgf(self, t: Tensor) -> Tensor:
        return -t + torch.log1p(self.p * torch.expm1(2 * t))

    def _cumulant(self, n: int) -> float:
        return 2 * self.p - 1 if n == 1 else 2.0**n * bernoulli_cumulant(n, self.p)

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.where(h > 0, np.log(self.p), np.log1p(-self.p))

    def atoms(self, t: float) -> np.ndarray:
        return np.array([-1.0, 1.0])

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        return 2.0 * (torch.rand(n, generator=generator, dtype=torch.float64) < self.p).to(torch.float64) - 1.0


@register_prior("exponential")
class ExponentialPrior(HiddenPrior):
    r"""$h \sim \mathrm{Exp}(\lambda)$: $K(t) = -\log(1 - t/\lambda)$ for $t < \lambda$.

    Cumulants $\kappa_n = (n-1)!/\lambda^n$ (logarithmic interactions, D5).
    """

    support = (0.0, math.inf)

    def __init__(self, rate: float = 1.0) -> None:
        self.rate = finite_number("rate", rate, above=0)
        self.domain = (-math.inf, self.rate)

    def _cgf(self, t: Tensor) -> Tensor:
        return -torch.log1p(-t / self.rate)

    def _cumulant(self, n: int) -> float:
        return math.factorial(n - 1) / self.rate**n

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.where(h >= 0, math.log(self.rate) - self.rate * h, -np.inf)

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        return -torch.log1p(-u) / self.rate


@register_prior("laplace")
class LaplacePrior(HiddenPrior):
    r"""$h \sim \mathrm{Laplace}(0, b)$: $K(t) = -\log(1 - b^2 t^2)$ for $|t| < 1/b$.

    $\kappa_n = 0$ for odd n and $\kappa_{2k} = 2 (2k-1)!\, b^{2k}$.
    """

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = finite_number("scale", scale, above=0)
        self.domain = (-1.0 / self.scale, 1.0 / self.scale)

    def _cgf(self, t: Tensor) -> Tensor:
        return -torch.log1p(-((self.scale * t) ** 2))

    def _cumulant(self, n: int) -> float:
        return 0.0 if n % 2 else 2.0 * math.factorial(n - 1) * self.scale**n

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        return -np.abs(h) / self.scale - math.log(2 * self.scale)

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        u = torch.rand(n, generator=generator, dtype=torch.float64) - 0.5
        return -self.scale * torch.sign(u) * torch.log1p(-2 * u.abs())


@register_prior("constant")
class ConstantPrior(HiddenPrior):
    r"""$h = c$ with probability one: $K(t) = c t$; $\kappa_1 = c$ is the only non-zero cumulant (D6)."""

    discrete = True

    def __init__(self, c: float = 1.0) -> None:
        self.c = finite_number("c", c)
        self.support = (self.c, self.c)

    def _cgf(self, t: Tensor) -> Tensor:
        return self.c * t

    def _cumulant(self, n: int) -> float:
        return self.c if n == 1 else 0.0

    def log_prob(self, h: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.where(h == self.c, 0.0, -np.inf)

    def atoms(self, t: float) -> np.ndarray:
        return np.array([self.c])

    def _sample(self, n: int, generator: torch.Generator) -> Tensor:
        return torch.full((n,), self.c, dtype=torch.float64)
