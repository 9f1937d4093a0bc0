r"""RBM effective energies: integrating out hidden units leaves their CGFs (seed 004 §2, D3-D5).

The joint energy $E(v, h) = -\sum_i a_i(v_i) - \sum_\mu b_\mu(h_\mu) - \sum_{i\mu} W_{i\mu} v_i h_\mu$
with hidden priors $q_\mu(h) \propto e^{b_\mu(h)}$ gives the visible marginal $p(v) \propto e^{-E(v)}$,

$$E(v) = -\sum_i a_i(v_i) - \sum_\mu K_\mu\Big(\sum_i W_{i\mu} v_i\Big)
       = -\sum_i a_i(v_i) - \sum_{n \ge 1} \frac{1}{n!} \sum_{i_1..i_n} J^{(n)}_{i_1..i_n} v_{i_1} \cdots v_{i_n},$$

with couplings $J^{(n)}_{i_1..i_n} = \sum_\mu \kappa^{(n)}_\mu W_{i_1\mu} \cdots W_{i_n\mu}$. The visible term
is $a_i(v) = a_i v - \tfrac12 \lambda_i v^2$ (binary units: $\lambda = 0$; Gaussian units: precision
$\lambda_i = 1/\sigma_i^2$). Shapes: ``v`` is ``(batch, visible)``, ``weights`` ``(visible, hidden)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from jaxtyping import Float
from scipy import integrate
from scipy.special import logsumexp
from torch import Tensor

from expattn.arguments import positive_int
from expattn.core.energy import HiddenPrior
from expattn.core.validate import as_tensor, check_finite, check_ndim

Priors = HiddenPrior | Sequence[HiddenPrior]


def _priors(priors: Priors, hidden: int) -> list[HiddenPrior]:
    if isinstance(priors, HiddenPrior):
        return [priors] * hidden
    priors = list(priors)
    if len(priors) != hidden or not all(isinstance(p, HiddenPrior) for p in priors):
        raise ValueError(f"priors must be one HiddenPrior or {hidden} of them (one per hidden unit), got {priors!r}")
    return priors


def hidden_fields(
    v: Float[Tensor, "batch visible"], weights: Float[Tensor, "visible hidden"]
) -> Float[Tensor, "batch hidden"]:
    r"""$t_\mu = \sum_i W_{i\mu} v_i$, the field each hidden unit sees; validates both arguments."""
    for name, value in (("v", v), ("weights", weights)):
        as_tensor(name, value)
        check_finite(name, value)
    check_ndim("v", v, 2, "(batch, visible)")
    if weights.ndim != 2 or weights.shape[0] != v.shape[-1]:
        raise ValueError(f"weights must have shape ({v.shape[-1]}, hidden), got {tuple(weights.shape)}")
    return v @ weights


def visible_term(
    v: Float[Tensor, "batch visible"],
    visible_bias: Float[Tensor, " visible"],
    visible_precision: Float[Tensor, " visible"] | None = None,
) -> Float[Tensor, " batch"]:
    r"""$\sum_i a_i(v_i) = \sum_i (a_i v_i - \tfrac12 \lambda_i v_i^2)$; ``None`` precision: binary units."""
    as_tensor("visible_bias", visible_bias)
    if visible_bias.shape != v.shape[-1:]:
        raise ValueError(f"visible_bias must have shape ({v.shape[-1]},), got {tuple(visible_bias.shape)}")
    out = v @ visible_bias
    if visible_precision is not None:
        as_tensor("visible_precision", visible_precision)
        if visible_precision.shape != v.shape[-1:] or (visible_precision <= 0).any():
            raise ValueError(f"visible_precision must be ({v.shape[-1]},) and > 0, got {visible_precision!r}")
        out = out - 0.5 * (v**2) @ visible_precision
    return out


def effective_energy(
    v: Float[Tensor, "batch visible"],
    weights: Float[Tensor, "visible hidden"],
    priors: Priors,
    visible_bias: Float[Tensor, " visible"],
    visible_precision: Float[Tensor, " visible"] | None = None,
) -> Float[Tensor, " batch"]:
    r"""$E(v) = -\sum_i a_i(v_i) - \sum_\mu K_\mu(\sum_i W_{i\mu} v_i)$ (claim D3, seed 004).

    Args:
        v: ``(batch, visible)`` visible configurations.
        weights: ``(visible, hidden)`` couplings $W_{i\mu}$.
        priors: one ``HiddenPrior`` for every hidden unit, or a sequence with one per unit.
        visible_bias, visible_precision: ``(visible,)`` $a_i$ and $\lambda_i$ of the visible term.

    Returns:
        ``(batch,)`` effective energies. ``ValueError`` if a field leaves a CGF's domain.
    """
    t = hidden_fields(v, weights)  # (B, M)
    priors = _priors(priors, weights.shape[1])
    interaction = sum(p.cgf(t[:, mu]) for mu, p in enumerate(priors))
    return -visible_term(v, visible_bias, visible_precision) - interaction


def log_mgf_numeric(prior: HiddenPrior, t: float) -> float:
    r"""$\log \int q(h) e^{t h} dh$ by summation over atoms or adaptive quadrature (independent of $K$).

    Discrete priors sum $q(h) e^{th}$ over ``prior.atoms(t)``; continuous ones integrate with
    ``scipy.integrate.quad`` on each side of 0, after shifting the log-integrand by its maximum on
    a grid so that nothing overflows. Returns ``inf`` where the integral diverges.
    """
    if prior.discrete:
        atoms = prior.atoms(t)
        return float(logsumexp(prior.log_prob(atoms) + t * atoms))
    lo, hi = prior.support
    grid = np.linspace(max(lo, -200.0), min(hi, 200.0), 4001)
    log_f = prior.log_prob(grid) + t * grid
    shift = float(np.max(log_f))
    pieces = [(lo, min(hi, 0.0)), (max(lo, 0.0), hi)]
    total = 0.0
    for a, b in pieces:
        if a < b:
            value, _ = integrate.quad(
                lambda h: math.exp(prior.log_prob(np.array(h)) + t * h - shift),
                a,
                b,
                epsabs=0.0,
                epsrel=1e-12,
                limit=200,
            )
            total += value
    return math.log(total) + shift


def marginal_energy_numeric(
    v: Float[Tensor, "batch visible"],
    weights: Float[Tensor, "visible hidden"],
    priors: Priors,
    visible_bias: Float[Tensor, " visible"],
    visible_precision: Float[Tensor, " visible"] | None = None,
) -> Float[Tensor, " batch"]:
    r"""$E(v) = -\sum_i a_i(v_i) - \sum_\mu \log \int q_\mu(h) e^{h \sum_i W_{i\mu} v_i} dh$, numerically.

    The hidden units are integrated out one by one (they are independent given $v$) with
    ``log_mgf_numeric``: the independent check of ``effective_energy`` (claim D3). Shapes as there.
    """
    t = hidden_fields(v, weights).detach().cpu().numpy()
    priors = _priors(priors, weights.shape[1])
    logs = [[log_mgf_numeric(p, float(t[b, mu])) for mu, p in enumerate(priors)] for b in range(t.shape[0])]
    interaction = torch.tensor(logs, dtype=v.dtype).sum(-1)
    return -visible_term(v, visible_bias, visible_precision) - interaction


def cumulant_series_energy(
    v: Float[Tensor, "batch visible"],
    weights: Float[Tensor, "visible hidden"],
    priors: Priors,
    visible_bias: Float[Tensor, " visible"],
    order: int,
    visible_precision: Float[Tensor, " visible"] | None = None,
) -> Float[Tensor, " batch"]:
    r"""$E_N(v) = -\sum_i a_i(v_i) - \sum_\mu \sum_{n=1}^{N} \kappa^{(n)}_\mu t_\mu^n / n!$, the truncated series.

    Converges to ``effective_energy`` as ``order`` grows wherever every $|t_\mu|$ lies inside the
    radius of convergence of $K_\mu$ (claim D3). Shapes as in ``effective_energy``.
    """
    positive_int("order", order)
    t = hidden_fields(v, weights)  # (B, M)
    priors = _priors(priors, weights.shape[1])
    kappa = torch.tensor([[p.cumulant(n) for p in priors] for n in range(1, order + 1)], dtype=t.dtype)  # (N, M)
    n = torch.arange(1, order + 1, dtype=t.dtype)
    powers = t.unsqueeze(0) ** n.view(-1, 1, 1) / torch.exp(torch.lgamma(n + 1)).view(-1, 1, 1)  # (N, B, M)
    interaction = (kappa.unsqueeze(1) * powers).sum((0, 2))
    return -visible_term(v, visible_bias, visible_precision) - interaction


def coupling_tensor(weights: Float[Tensor, "visible hidden"], priors: Priors, n: int) -> Tensor:
    r"""$J^{(n)}_{i_1..i_n} = \sum_\mu \kappa^{(n)}_\mu W_{i_1\mu} \cdots W_{i_n\mu}$, shape ``(visible,) * n``.

    The n-th order interaction the hidden units induce between visible units (claim D3): $J^{(1)}$
    is a field, $J^{(2)} = W \operatorname{diag}(\kappa_2) W^\top$ the Hopfield coupling (D4).
    """
    as_tensor("weights", weights)
    priors = _priors(priors, weights.shape[1])
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 6:
        raise ValueError(f"n must be an integer in [1, 6] (the tensor has visible**n entries), got {n!r}")
    kappa = torch.tensor([p.cumulant(n) for p in priors], dtype=weights.dtype)
    letters = "abcdef"[:n]
    spec = ",".join(f"{c}z" for c in letters) + ",z->" + letters
    return torch.einsum(spec, *([weights] * n), kappa)


def classical_hopfield_energy(
    v: Float[Tensor, "batch visible"], weights: Float[Tensor, "visible hidden"], visible_bias: Float[Tensor, " visible"]
) -> Float[Tensor, " batch"]:
    r"""$E(v) = -\sum_i a_i v_i - \tfrac12 \sum_{ij} (\sum_\mu W_{i\mu} W_{j\mu}) v_i v_j$ (claim D4)."""
    t = hidden_fields(v, weights)
    return -visible_term(v, visible_bias) - 0.5 * (t**2).sum(-1)


def exponential_interaction_energy(
    v: Float[Tensor, "batch visible"], weights: Float[Tensor, "visible hidden"], visible_bias: Float[Tensor, " visible"]
) -> Float[Tensor, " batch"]:
    r"""$E(v) = -\sum_i a_i v_i - \sum_\mu \exp(\sum_i W_{i\mu} v_i)$, the modern discrete Hopfield energy (D5).

    Poisson(1) hidden units give this energy plus the constant ``hidden`` (from $K(t) = e^t - 1$).
    """
    t = hidden_fields(v, weights)
    return -visible_term(v, visible_bias) - torch.exp(t).sum(-1)
