r"""The modern continuous Hopfield energy and its update, once for the package (claim D1).

With stored patterns $x_n$ (rows of $X$) and inverse temperature $\beta$, the energy of a state
$\xi$ is the quadratic minus the empirical carrier's log-normalizer $G$ at $\beta\xi$:

$$E(\xi) = \tfrac12 \xi^\top\xi - \beta^{-1} G(\beta\xi), \qquad G(\theta) = \log\sum_n e^{x_n^\top\theta},
\qquad \xi \leftarrow \nabla_\xi\, \beta^{-1} G(\beta\xi) = X^\top \operatorname{softmax}(\beta X \xi)$$

(the constants $\beta^{-1}\log N + \tfrac12 M^2$ of Ramsauer et al. left out). The update is the
concave-convex procedure on $E$: it never increases $E$. ``expattn.nn.hopfield`` (the modules)
and ``expattn.core.hopfield_mixture`` (the density $e^{-\beta E}$) compute through these functions.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from expattn.core.validate import check_finite, check_output
from expattn.validation import validate_enabled


def check_beta(beta: float | Tensor) -> Tensor | float:
    """``beta`` > 0 and finite, as a float or a floating tensor unsqueezed to broadcast over ``(*batch, query, 1)``."""
    if isinstance(beta, Tensor):
        if not beta.is_floating_point():
            raise TypeError(f"beta must be a float or a floating tensor, got dtype {beta.dtype}")
        if not (torch.isfinite(beta).all() and (beta > 0).all()):
            raise ValueError("beta must be finite and > 0 everywhere")
        return beta.unsqueeze(-1)  # broadcasts over (*batch, query) -> (*batch, query, 1)
    if not isinstance(beta, int | float) or isinstance(beta, bool) or not math.isfinite(beta) or beta <= 0:
        raise ValueError(f"beta must be a finite number > 0, got {beta!r}")
    return float(beta)


OVERFLOW = "the logits beta * X xi overflow the floating range; scale the patterns or beta down"


def _check_inputs(xi: Tensor, patterns: Tensor) -> None:
    check_finite("xi", xi)
    check_finite("patterns", patterns)


def hopfield_logits(
    xi: Float[Tensor, "*batch query dim"],
    patterns: Float[Tensor, "*batch pattern dim"],
    beta: float | Tensor,
    mask: Bool[Tensor, "*batch pattern"] | None,
) -> Float[Tensor, "*batch query pattern"]:
    r"""$\beta X\xi$ with $-\infty$ on masked patterns; checks shapes and the mask.

    ``beta``: a float or a tensor already broadcasting to ``(*batch, query, 1)`` (``check_beta``).
    """
    for name, x in (("xi", xi), ("patterns", patterns)):
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (*batch, n, dim), got {tuple(x.shape)}")
    if xi.shape[-1] != patterns.shape[-1]:
        raise ValueError(f"xi has dimension {xi.shape[-1]}, expected {patterns.shape[-1]} to match patterns")
    if patterns.shape[-2] == 0 and xi.shape[:-1].numel() > 0:  # no query: empty results, nothing undefined
        raise ValueError("patterns must hold at least one stored pattern, got none")
    logits = (beta * xi) @ patterns.mT  # (*B, Q, N); scaling xi is cheaper than the logits
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask must be a bool tensor (True = keep), got {getattr(mask, 'dtype', type(mask))}")
        if mask.shape[-1] != patterns.shape[-2]:
            raise ValueError(f"mask has {mask.shape[-1]} entries on its last axis, expected {patterns.shape[-2]}")
        if not mask.any(-1).all():
            raise ValueError("mask removes every stored pattern of some batch element")
        logits = logits.masked_fill(~mask.unsqueeze(-2), -torch.inf)
    return logits


def energy_from_log_normalizer(
    xi: Float[Tensor, "*batch query dim"],
    log_normalizer: Float[Tensor, "*batch query"],
    beta: float | Tensor,
) -> Float[Tensor, "*batch query"]:
    r"""$E = \tfrac12 \xi^\top\xi - \beta^{-1} G$ from $G = \operatorname{logsumexp}_n(\beta x_n^\top\xi)$.

    For callers that have $G$ already (from a fused softmax); ``beta`` a float or a tensor
    broadcasting to ``(*batch, query)``.
    """
    return 0.5 * (xi * xi).sum(-1) - log_normalizer / beta


def hopfield_energy(
    xi: Float[Tensor, "*batch query dim"],
    patterns: Float[Tensor, "*batch pattern dim"],
    beta: float | Float[Tensor, "*#batch"] = 1.0,
    mask: Bool[Tensor, "*batch pattern"] | None = None,
) -> Float[Tensor, "*batch query"]:
    r"""Modern Hopfield energy (claim D1), without its constant.

    $$E(\xi) = \tfrac12 \xi^\top\xi - \beta^{-1}\operatorname{logsumexp}_n(\beta\, x_n^\top\xi)$$

    Args:
        xi: state patterns ``(*batch, query, dim)``.
        patterns: stored patterns $X$ as rows, ``(*batch, pattern, dim)``.
        beta: inverse temperature > 0, a float or a tensor broadcasting to ``*batch`` (e.g.
            ``(head, 1)`` for per-head values on ``(batch, head, query, dim)`` inputs).
        mask: bool ``(*batch, pattern)``, True = pattern stored.

    Returns:
        ``(*batch, query)``. Seed 001; 004 prints it with the minus signs lost.
    """
    b = check_beta(beta)
    logits = hopfield_logits(xi, patterns, b, mask)
    _check_inputs(xi, patterns)
    lse = torch.logsumexp(logits, dim=-1)
    energy = energy_from_log_normalizer(xi, lse, b.squeeze(-1) if isinstance(b, Tensor) else b)
    return check_output("hopfield_energy", energy, OVERFLOW) if validate_enabled() else energy


def hopfield_update(
    xi: Float[Tensor, "*batch query dim"],
    patterns: Float[Tensor, "*batch pattern dim"],
    beta: float | Float[Tensor, "*#batch"] = 1.0,
    mask: Bool[Tensor, "*batch pattern"] | None = None,
) -> Float[Tensor, "*batch query dim"]:
    r"""One modern Hopfield update (claim D1), the gradient of the log-sum-exp term.

    $$\xi^{\mathrm{new}} = X^\top \operatorname{softmax}(\beta X \xi)
    = \nabla_\xi\, \beta^{-1}\operatorname{logsumexp}(\beta X\xi)$$

    Args and shapes as ``hopfield_energy``. Returns ``(*batch, query, dim)``.
    """
    logits = hopfield_logits(xi, patterns, check_beta(beta), mask)
    _check_inputs(xi, patterns)
    new = hopfield_weights(logits) @ patterns
    return check_output("hopfield_update", new, OVERFLOW) if validate_enabled() else new


def hopfield_weights(logits: Float[Tensor, "*batch query pattern"], reuse: bool = False
                     ) -> Float[Tensor, "*batch query pattern"]:
    r"""$p = \operatorname{softmax}(\beta X\xi)$ from the logits; the update is $X^\top p$.

    Half precision is reduced in float32 inside torch's softmax kernel (CPU and CUDA accumulate half types in
    float32) and returned in the input dtype, without a float32 copy of the logits. ``reuse``: the logits are not
    needed afterwards, so where no gradient flows through them the weights overwrite them (the same numbers; one
    buffer of ``(*batch, query, pattern)`` instead of two).
    """
    if reuse and not (logits.requires_grad and torch.is_grad_enabled()):
        return torch.softmax(logits, dim=-1, out=logits)
    return torch.softmax(logits, dim=-1)
