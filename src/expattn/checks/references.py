"""Independent reference computations for the checks: scipy quadrature and plain numpy formulas.

Nothing here calls ``expattn.core``: these are the numbers the library is compared against.
Densities are passed as functions of a float ``x`` returning $\\log h(x)$.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import integrate, optimize, special


def moments_1d(
    log_h: Callable[[np.ndarray], np.ndarray], eta: float, lo: float, hi: float
) -> tuple[float, float, float]:
    r"""$(\log\int h e^{x\eta}dx,\ E[x],\ \operatorname{Var}[x])$ under $p(x|\eta)$ by adaptive quadrature.

    ``log_h`` is vectorised over numpy arrays. The integrand is rescaled by its largest value on a
    grid over [lo, hi] (clipped to [-60, 60]) so that large exponents do not overflow.
    """
    grid = np.linspace(max(lo, -60.0), min(hi, 60.0), 1201)[1:-1]
    with np.errstate(divide="ignore"):
        shift = float(np.max(log_h(grid) + grid * eta))

    def weight(x: float) -> float:
        return math.exp(log_h(x) + x * eta - shift)

    opts = {"epsabs": 0.0, "epsrel": 1e-12, "limit": 200}
    z = integrate.quad(weight, lo, hi, **opts)[0]
    m1 = integrate.quad(lambda x: x * weight(x), lo, hi, **opts)[0] / z
    var = integrate.quad(lambda x: (x - m1) ** 2 * weight(x), lo, hi, **opts)[0] / z
    return math.log(z) + shift, m1, var


def normal_log_pdf(x: np.ndarray, mean: np.ndarray | float, var: np.ndarray | float) -> np.ndarray:
    r"""$\log\mathcal{N}(x; m, v)$ in one dimension, vectorised (``math`` for a float ``x`` and float parameters)."""
    if np.ndim(x) == 0 and np.ndim(mean) == 0 and np.ndim(var) == 0:
        return -0.5 * ((x - mean) ** 2 / var + math.log(2 * math.pi * var))
    return -0.5 * ((x - mean) ** 2 / var + np.log(2 * math.pi * var))


def gamma_log_pdf(x: np.ndarray, shape: float, rate: float) -> np.ndarray:
    r"""$\log$ of the Gamma density $\beta^\alpha x^{\alpha - 1} e^{-\beta x} / \Gamma(\alpha)$, vectorised."""
    log_x = math.log(x) if np.ndim(x) == 0 else np.log(x)
    return (shape - 1) * log_x - rate * x + shape * math.log(rate) - math.lgamma(shape)


def mixture_log_pdf(log_w: np.ndarray, means: np.ndarray, variances: np.ndarray) -> Callable:
    r"""The function $x \mapsto \log\sum_n w_n\mathcal{N}(x; m_n, v_n)$ in one dimension.

    Vectorised over numpy arrays; a float argument takes a pure-``math`` path (quadrature calls it
    thousands of times).
    """
    terms = [
        (float(lw) - 0.5 * math.log(2 * math.pi * v), float(m), float(v))
        for lw, m, v in zip(log_w, means, variances, strict=True)
    ]

    def log_density(x):
        if np.ndim(x) == 0:
            values = [c - 0.5 * (x - m) ** 2 / v for c, m, v in terms]
            top = max(values)
            return top + math.log(sum(math.exp(value - top) for value in values))
        x = np.asarray(x, dtype=float)[..., None]
        return special.logsumexp(log_w + normal_log_pdf(x, means, variances), axis=-1)

    return log_density


def gaussian_log_partition_2d(mean: np.ndarray, cov: np.ndarray, eta: np.ndarray, half_width: float) -> float:
    r"""$\log\int\mathcal{N}(x; \mu, \Sigma)\, e^{x^\top\eta}dx$ in two dimensions by ``scipy.integrate.dblquad``.

    The box is centred on the tilted mean $\mu + \Sigma\eta$ (where the integrand peaks) with the given
    half width; the density is written out with ``math`` so each evaluation is cheap.
    """
    (a, b), (c, d) = np.linalg.inv(cov).tolist()
    log_norm = -math.log(2 * math.pi) - 0.5 * math.log(np.linalg.det(cov))
    (m0, m1), (e0, e1) = mean.tolist(), eta.tolist()
    x0, y0 = (mean + cov @ eta).tolist()
    peak = a * (x0 - m0) ** 2 + (b + c) * (x0 - m0) * (y0 - m1) + d * (y0 - m1) ** 2
    shift = log_norm + x0 * e0 + y0 * e1 - 0.5 * peak

    def f(y: float, x: float) -> float:
        u, v = x - m0, y - m1
        return math.exp(log_norm - 0.5 * (a * u * u + (b + c) * u * v + d * v * v) + x * e0 + y * e1 - shift)

    w = half_width
    value = integrate.dblquad(f, x0 - w, x0 + w, y0 - w, y0 + w, epsabs=0.0, epsrel=1e-11)[0]
    return math.log(value) + shift


def discrete_family(log_w: np.ndarray, atoms: np.ndarray, eta: np.ndarray) -> tuple[float, np.ndarray]:
    r"""$(G(\eta), p)$ of the discrete family $\sum_n w_n \delta_{x_n}$: logsumexp and softmax."""
    logits = log_w + atoms @ eta
    return float(special.logsumexp(logits)), special.softmax(logits)


def conjugate_by_optimiser(
    log_normalizer: Callable[[np.ndarray], tuple[float, np.ndarray]],
    m: np.ndarray,
    start: np.ndarray,
    bounds: list[tuple[float | None, float | None]] | None = None,
) -> tuple[float, np.ndarray]:
    r"""$G^*(m) = \sup_\eta \eta^\top m - G(\eta)$ by ``scipy.optimize.minimize`` (BFGS, or L-BFGS-B with bounds).

    ``log_normalizer(eta)`` returns ``(G, grad G)``. Returns ``(value, maximiser)``.
    """

    def negative(eta: np.ndarray) -> tuple[float, np.ndarray]:
        g, grad = log_normalizer(eta)
        return g - eta @ m, grad - m

    method = "L-BFGS-B" if bounds is not None else "BFGS"
    options = {"gtol": 1e-12, "maxiter": 2000} if bounds is None else {"gtol": 1e-12, "ftol": 1e-15, "maxiter": 5000}
    result = optimize.minimize(negative, start, jac=True, method=method, bounds=bounds, options=options)
    return float(-result.fun), result.x


def kl_1d(log_h: Callable[[float], float], a: float, b: float, lo: float, hi: float) -> float:
    r"""$\mathrm{KL}(p(\cdot|a)\,\|\,p(\cdot|b)) = \int p_a \log(p_a / p_b)\,dx$ by quadrature of the definition,
    with $\log p_\eta(x) = \log h(x) + x\eta - G(\eta)$ and $G$ itself from quadrature."""
    g_a, g_b = moments_1d(log_h, a, lo, hi)[0], moments_1d(log_h, b, lo, hi)[0]

    def integrand(x: float) -> float:
        log_pa = log_h(x) + x * a - g_a
        return math.exp(log_pa) * (log_pa - (log_h(x) + x * b - g_b))

    return integrate.quad(integrand, lo, hi, epsabs=1e-14, epsrel=1e-12, limit=200)[0]
