r"""The attention Fisher of a head, its regularised inverse and the Fisher readings' dense targets (E4, E9;
``e4_readings`` states the readings): $(M_+ + \lambda I)^{-1}$ with $\lambda = 10^{-2}\operatorname{tr}M/D$."""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.core import top_eigen as eigensolver
from expattn.core.top_eigen import TopEigen, top_eigen, top_pairs
from expattn.probes.models.attention import AttnWeights, attention_probs
from expattn.probes.statistics.stats import gram

RIDGE = 1e-2  # the reference inverse's ridge: (Sigma + 1e-2 tr(Sigma)/D I)^-1


def ridge_of(m: Float[Tensor, "*batch dim dim"]) -> Float[Tensor, " *batch"]:
    r"""The reference inverse's ridge $\lambda = 10^{-2}\operatorname{tr}M/D$ per matrix."""
    return RIDGE * torch.diagonal(m, dim1=-2, dim2=-1).mean(-1)


def spectral_inverse(
    values: Float[Tensor, "*batch dim"], vectors: Float[Tensor, "*batch dim dim"], lam: Float[Tensor, " *batch"]
) -> tuple[Float[Tensor, "*batch dim dim"], Float[Tensor, "*batch dim"]]:
    r"""$(M_+ + \lambda I)^{-1} = WW^\top$, $W = V\operatorname{diag}(1/(\max(\theta, 0) + \lambda))^{1/2}$ from $M$'s
    decomposition ``values`` $\theta$ (ascending) and ``vectors`` $V$, in ``vectors``' dtype: the inverse and its
    eigenvalues in ascending order (with $V$'s columns reversed, its eigenvectors)."""
    inv_values = (values.to(vectors.dtype).clamp_min(0) + lam.to(vectors.dtype).unsqueeze(-1)).reciprocal()
    return gram((vectors * inv_values.sqrt().unsqueeze(-2)).mT), inv_values.flip(-1)  # values descending, flipped


def regularised_inverse(m: Float[Tensor, "*batch dim dim"]) -> tuple[Float[Tensor, "*batch dim dim"], float, int]:
    r"""$(M_+ + \lambda I)^{-1}$ with $\lambda = 10^{-2}\operatorname{tr}M/D$ (batched over leading dims), where
    $M_+$ is $M$ with negative eigenvalues clipped to 0; returns it, $\lambda$ (mean over the batch)
    and how many matrices needed the clipping.

    Only the lower triangle of ``M`` is read (it is symmetric up to rounding). Through a float32
    Cholesky factor: the ridge bounds the condition number by $100 D + 1$, so
    float32 leaves cosines accurate to ~1e-4. A matrix that float32 rounding (or its estimate)
    leaves indefinite falls back to a float64 eigendecomposition with the clipping (``spectral_inverse``).
    """
    lam = ridge_of(m)
    reg = m.to(torch.float32, copy=True)
    reg.diagonal(dim1=-2, dim2=-1).add_(lam.to(torch.float32).unsqueeze(-1))
    chol, info = torch.linalg.cholesky_ex(reg)  # reads the lower triangle only: no symmetrising copy
    inv = torch.cholesky_inverse(chol).to(m.dtype)
    bad = info != 0
    if bad.any():
        e, v = torch.linalg.eigh(m[bad].double())
        inv[bad] = spectral_inverse(e, v, lam.expand(info.shape)[bad])[0].to(m.dtype)
    return inv, float(lam.mean()), int(bad.sum())


def attention_fisher(xs: Float[Tensor, "batch token dim"], w: AttnWeights, basis: Float[Tensor, "dim r"]
                     ) -> Float[Tensor, "heads r r"]:
    r"""Per head $U^\top F_h U = E_i \operatorname{Cov}_{p_h(j|i)}[U^\top x_j]$ over the sequences ``xs`` under the
    attention of weights ``w``, for a ``basis`` $U$ ``(D, r)``: ``(H, r, r)`` float32.

    Per sequence, $\sum_i \operatorname{Cov}_{p_i}[y] = \sum_j w_j y_j y_j^\top - \sum_i m_i m_i^\top
    = Y^\top K Y$ with $w_j = \sum_i p_{ij}$ (the attention key $j$ receives), $m_i = \sum_j p_{ij} y_j$ and
    $K = \operatorname{diag}(w) - P^\top P$ ``(T, T)``, positive semi-definite when $P$'s rows sum to 1. The
    two sums nearly cancel for a head whose attention is nearly one-hot (its covariances are small), so the
    cancellation happens in $K$, formed in float64 from $P$'s rows renormalised in float64 (a $T^3$ product per
    head and sequence), not between two float32 ``(r, r)`` Gram matrices, whose rounding is relative to the
    sums' size rather than the result's; the ``(r, r)`` result then takes one product of $Y^\top$ with $KY$ per
    head ($T r^2$ per sequence, half of two Gram matrices)."""
    p = attention_probs(xs, w).transpose(0, 1).double()  # (H, B, T, T)
    p /= p.sum(-1, keepdim=True)
    k = (p.mT @ p).neg_()  # (H, B, T, T): K, in place
    k.diagonal(dim1=-2, dim2=-1).add_(p.sum(-2))
    del p
    # the covariance is shift invariant; centring keeps float32 accurate. Coordinates y = U^T x_c: (B, T, r)
    y = (xs - xs.mean(1, keepdim=True)) @ basis
    ky = k.to(y.dtype) @ y  # (H, B, T, r)
    del k
    f = y.flatten(0, 1).mT @ ky.flatten(1, 2)  # (H, r, r): sum over sequences of Y^T K Y
    return (f + f.mT) / (2 * xs.shape[0] * xs.shape[1])


def fisher_targets(fisher: Float[Tensor, "heads r r"], k: int, start: torch.Generator
                   ) -> tuple[dict[str, Tensor], dict[str, TopEigen], float, int]:
    r"""The Fisher readings' dense targets ``{"fisher": F_h, "fisher_inv": (F_h+ + lambda_F I)^-1}`` ``(H, r, r)``,
    each one's top ``k`` eigenpairs (``TopEigen``), $\lambda_F$ (mean over heads) and the heads clipped.

    On ``DENSE_DEVICES`` (a CPU) one ``eigh`` of $F_h$ in its own dtype gives all of it: the inverse shares $F_h$'s
    eigenvectors (``spectral_inverse``), and its top pairs are $F_h$'s bottom ones; the heads clipped are those with
    an eigenvalue below $-\lambda_F$ (the ones a float32 Cholesky of $F_h + \lambda_F I$ refuses). $F_h$ is formed
    in float32 (``E4Alignment.fisher``), so its entries already carry float32 rounding: a float32 ``eigh`` (2.8 times
    faster than float64 at $r = 896$, benchmarks/RESULTS.md) is backward stable to the same order, and each
    target's top pairs are checked against the target itself (``top_pairs``' residuals, float64). Elsewhere (CUDA, where
    ``eigh`` is slow) ``regularised_inverse`` and ``top_eigen``'s iterative solver for each target, its start drawn
    from ``start``."""
    if fisher.device.type not in eigensolver.DENSE_DEVICES:  # read at the call: a test can empty it
        inverse, ridge, clipped = regularised_inverse(fisher)
        dense = {"fisher": fisher, "fisher_inv": inverse}
        return dense, {name: top_eigen(m, k, start) for name, m in dense.items()}, ridge, clipped
    lam = ridge_of(fisher)
    e, v = torch.linalg.eigh((fisher + fisher.mT) / 2)
    inverse, inv_values = spectral_inverse(e, v, lam)
    tops = {"fisher": top_pairs(fisher, e, v, k),
            "fisher_inv": top_pairs(inverse, inv_values, v[..., :k].flip(-1), k)}
    clipped = int((e[..., 0] < -lam).sum())
    return {"fisher": fisher, "fisher_inv": inverse.to(fisher.dtype)}, tops, float(lam.mean()), clipped
