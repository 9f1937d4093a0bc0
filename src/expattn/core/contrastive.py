r"""Contrastive losses as the negative log-likelihood of the empirical family (claims C1, C2).

With the anchor as natural parameter $\eta = a / \tau$ and the candidate embeddings $x_1..x_N$ as
the atoms of an empirical carrier, the InfoNCE / N-pair loss of the positive $x_t$ is

$$\ell = -\log p(x_t \mid \eta) = G(\eta) - x_t^\top\eta
      = \operatorname{logsumexp}_n(x_n^\top a / \tau) - x_t^\top a / \tau,$$

the cross-entropy of the similarity logits (claim C1; seed 000 §2.2). The cosine variant first
projects anchors and candidates to the unit sphere, the contraction that keeps the ascent bounded
(claim C2).
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor

from expattn.arguments import finite_number
from expattn.core.empirical import Empirical
from expattn.core.validate import as_tensor, check_finite, check_ndim

REDUCTIONS = ("mean", "sum", "none")


def project_to_sphere(x: Float[Tensor, "*batch dim"], name: str = "x") -> Float[Tensor, "*batch dim"]:
    r"""$x / \lVert x\rVert$ along the last axis; a zero vector has no direction and raises ``ValueError``."""
    as_tensor(name, x)
    check_finite(name, x)
    norm = x.norm(dim=-1, keepdim=True)
    if (norm == 0).any():
        raise ValueError(f"{name} holds a zero vector, which has no projection to the unit sphere")
    return x / norm


def _check_temperature(temperature: float) -> float:
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise TypeError(f"temperature must be a number, got {type(temperature).__name__}")
    return finite_number("temperature", temperature, above=0)


def contrastive_family(
    anchors: Float[Tensor, "*batch query dim"],
    candidates: Float[Tensor, "*batch key dim"],
    temperature: float = 1.0,
    cosine: bool = False,
) -> tuple[Empirical, Float[Tensor, "*batch query dim"]]:
    r"""The empirical family of a contrastive loss: carrier over ``candidates``, $\eta = a / \tau$.

    Returns ``(carrier, eta)``; with ``cosine`` both sides are projected to the unit sphere first.
    """
    temperature = _check_temperature(temperature)
    as_tensor("anchors", anchors)
    check_ndim("anchors", anchors, 2, "(*batch, query, dim)")
    as_tensor("candidates", candidates)
    check_ndim("candidates", candidates, 2, "(*batch, key, dim)")
    if anchors.shape[-1] != candidates.shape[-1]:
        raise ValueError(
            f"anchors have dim {anchors.shape[-1]} but candidates have dim {candidates.shape[-1]}; they must match"
        )
    if cosine:
        anchors = project_to_sphere(anchors, "anchors")
        candidates = project_to_sphere(candidates, "candidates")
    return Empirical(candidates), anchors / temperature


def info_nce(
    anchors: Float[Tensor, "*batch query dim"],
    candidates: Float[Tensor, "*batch key dim"],
    targets: Int[Tensor, "*batch query"],
    temperature: float = 1.0,
    cosine: bool = False,
    reduction: str = "mean",
) -> Float[Tensor, ""] | Float[Tensor, "*batch query"]:
    r"""InfoNCE / N-pair loss $-\log p(x_{t} \mid a/\tau)$ under the empirical family over ``candidates``.

    $$\ell_i = \operatorname{logsumexp}_n(x_n^\top a_i/\tau) - x_{t_i}^\top a_i/\tau$$

    Args:
        anchors: ``(*batch, query, dim)`` anchor embeddings (natural parameters before scaling).
        candidates: ``(*batch, key, dim)`` positives and negatives (the atoms).
        targets: integer ``(*batch, query)``: index of each anchor's positive among the candidates.
        temperature: $\tau > 0$; the natural parameter is $a / \tau$.
        cosine: project anchors and candidates to the unit sphere first (cosine similarity, C2).
        reduction: ``"mean"``, ``"sum"`` or ``"none"`` (per-anchor losses ``(*batch, query)``); with no anchors
            ``"none"`` is empty, ``"sum"`` is 0 and ``"mean"`` (0 / 0) raises ``ValueError``.

    Claim C1: equals ``F.cross_entropy`` of the similarity logits.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    carrier, eta = contrastive_family(anchors, candidates, temperature, cosine)
    if not isinstance(targets, Tensor) or targets.is_floating_point() or targets.dtype == torch.bool:
        raise TypeError("targets must be an integer tensor of candidate positions")
    if targets.shape != eta.shape[:-1]:
        raise ValueError(f"targets has shape {tuple(targets.shape)}, expected {tuple(eta.shape[:-1])} (one per anchor)")
    keys = carrier.atoms.shape[-2]
    if targets.numel() and (targets.min() < 0 or targets.max() >= keys):
        raise ValueError(f"targets must index candidates in [0, {keys}), got values outside")
    losses = -carrier.log_prob(targets, eta)  # (*B, Q)
    if reduction == "none":
        return losses
    if reduction == "mean" and not losses.numel():  # 0 / 0: refused rather than a silent NaN
        raise ValueError(f"reduction 'mean' needs at least one anchor, got anchors of shape {tuple(anchors.shape)}; "
                         "use reduction 'sum' (0) or 'none' (empty)")
    return losses.mean() if reduction == "mean" else losses.sum()


def in_batch_info_nce(
    anchors: Float[Tensor, "batch dim"],
    positives: Float[Tensor, "batch dim"],
    temperature: float = 1.0,
    cosine: bool = False,
    symmetric: bool = False,
) -> Float[Tensor, ""]:
    r"""N-pair loss with in-batch negatives: anchor $i$'s positive is ``positives[i]``, the others are negatives.

    $$\ell = \frac1B\sum_i \Big(\operatorname{logsumexp}_j(p_j^\top a_i/\tau) - p_i^\top a_i/\tau\Big)$$

    ``symmetric`` averages with the loss of the swapped roles (the CLIP/SimCLR form). Claim C1.
    """
    as_tensor("anchors", anchors)
    as_tensor("positives", positives)
    if anchors.ndim != 2 or anchors.shape != positives.shape:
        raise ValueError(
            f"anchors and positives must both be (batch, dim) of one shape, got {tuple(anchors.shape)} "
            f"and {tuple(positives.shape)}"
        )
    targets = torch.arange(anchors.shape[0], device=anchors.device)
    loss = info_nce(anchors, positives, targets, temperature, cosine)
    if symmetric:
        loss = 0.5 * (loss + info_nce(positives, anchors, targets, temperature, cosine))
    return loss
