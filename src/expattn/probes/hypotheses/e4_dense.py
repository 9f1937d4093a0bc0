r"""The Fisher readings' cosines (E4, E9) from each head's dense $F_h$ and its top-$k$ eigenpairs only.

A Fisher reading compares $\operatorname{sym}(u^\top v)$ (rows ``u, v`` ``(H, rows, r)`` in range coordinates) with
a per-head target $M_h$ (``(H, r, r)``: $F_h$, or $\lambda_F(F_h + \lambda_F I)^{-1}$), its rival $M'_h$, the
identity and the target's spectrum on Haar-random eigenvectors, each also with the target's top-$k$ eigenvectors
$X_k$ ``(H, r, k)`` projected out, $P = I - X_kX_k^\top$. None of it needs a full eigendecomposition:

$$\langle u^\top v, PMP\rangle = \textstyle\sum (uM)\odot v - \sum (uX)\odot(vMX) - \sum (uMX)\odot(vX)
+ \sum C\odot (uX)^\top(vX),\qquad C = X^\top M X,$$

$$\lVert PMP\rVert_F^2 = \lVert M\rVert_F^2 - 2\lVert MX\rVert_F^2 + \lVert C\rVert_F^2,\qquad
\langle u^\top v, P\rangle = \textstyle\sum u\odot v - \sum (uX)\odot(vX),\qquad \lVert P\rVert_F^2 = r - k,$$

exact for any orthonormal $X$ (the top-$k$ eigenvectors of ``core.top_eigen``, to its residual tolerance). The
spectrum rival is $\cos(A, Q\,PMP\,Q^\top) = \cos(\operatorname{sym}((uQ)^\top vQ), PMP)$ for a Haar-random $Q$:
$QV_h$ is Haar-random as $V_hQ$ is, so this is the target's spectrum on random eigenvectors without its
eigenvectors (the trace identity of ``benchmarks/RESULTS.md``). Cost: one $(H, \text{rows}, r) \times (H, r, r)$
product per set of rows and matrix, then $O(H\,\text{rows}\,r\,K)$ for every deflation $k \le K$ together: each
sum over the first $k$ columns of $X$ is a prefix sum of per-column terms (over the leading $k \times k$ block
for $C$).
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.hypotheses.e4_readings import sym_norm


def _upto(a: Tensor, ks: Tensor) -> Tensor:
    """Per $k$ in ``ks``, the sum of the first $k$ entries of ``a`` ``(..., K)``: ``(..., len(ks))``."""
    return torch.nn.functional.pad(a.cumsum(-1), (1, 0))[..., ks]


def _upto_block(a: Tensor, ks: Tensor) -> Tensor:
    r"""Per $k$ in ``ks``, the sum of the leading $k \times k$ block of ``a`` ``(..., K, K)``: ``(..., len(ks))``."""
    return torch.nn.functional.pad(a.cumsum(-1).cumsum(-2), (1, 0, 1, 0))[..., ks, ks]


def _inner(u: Tensor, v: Tensor, um: Tensor, mx: Tensor, c: Tensor, x: Tensor, ks: Tensor) -> Tensor:
    r"""$\langle u^\top v, P_kMP_k\rangle$ per head and $k$ in ``ks`` ``(H, len(ks))`` from ``um = u @ M``,
    ``mx = M @ X``, ``c = X^T M X`` with all ``K`` columns of ``x``: the module docstring's sums over the first $k$
    columns, each a prefix sum of per-column terms."""
    ux, vx = u @ x, v @ x  # (H, rows, K)
    return ((um * v).sum((-1, -2)).unsqueeze(-1) - _upto((ux * (v @ mx)).sum(-2), ks)
            - _upto(((u @ mx) * vx).sum(-2), ks) + _upto_block(c * (ux.mT @ vx), ks))


def _cos(inner: Tensor, norm: Tensor) -> Tensor:
    """``inner / norm``, 0 where the norm is 0 (the zero form or the zero target)."""
    return torch.where(norm > 0, inner / norm.clamp_min(torch.finfo(norm.dtype).tiny), 0.0)


def dense_deflated(
    heads: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]],
    matrices: dict[str, Float[Tensor, "heads r r"]],
    target: str,
    x: Float[Tensor, "heads r k"],
    ks: tuple[int, ...],
) -> dict[int, dict[str, dict[str, Float[Tensor, " heads"]]]]:
    r"""Per $k$ in ``ks`` (0: no deflation) and per set of heads, the cosines of $\operatorname{sym}(u^\top v)$
    with each of ``matrices`` (the target ``target`` and its rival, symmetric ``(H, r, r)``), ``identity`` and
    ``haar_<target>`` (the target with the rows rotated by $Q$), each with the first $k$ columns of ``x``
    ``(H, r, K)`` (the target's top eigenvectors, orthonormal) projected out of every target (module docstring).
    ``heads[name] = (u, v, uQ, vQ)``, rows ``(H, rows, r)`` (``rows`` may broadcast over heads). Every $k$ comes
    from the same products with the first ``max(ks)`` columns: one set of products per set of heads."""
    x = x[..., :max(ks)].to(matrices[target].dtype)
    r, at = x.shape[-2], torch.tensor(ks, device=x.device)
    mx = {key: m @ x for key, m in matrices.items()}  # (H, r, K)
    full = {key: x.mT @ v for key, v in mx.items()}  # (H, K, K): X^T M X
    t_norm = {key: (torch.linalg.matrix_norm(m).square().unsqueeze(-1) - 2 * _upto(mx[key].square().sum(-2), at)
                    + _upto_block(full[key].square(), at)).clamp_min(0).sqrt()
              for key, m in matrices.items()}  # (H, len(ks)): |P_k M P_k|_F
    identity = (r - at.to(x.dtype)).sqrt()
    out: dict[int, dict[str, dict[str, Tensor]]] = {k: {} for k in ks}
    for name, (u, v, uq, vq) in heads.items():
        norm = sym_norm(u, v).unsqueeze(-1)  # the form is kept whole: one norm for every target (Q is orthogonal)
        cos = {key: _cos(_inner(u, v, u @ m, mx[key], full[key], x, at), norm * t_norm[key])
               for key, m in matrices.items()}
        cos[f"haar_{target}"] = _cos(_inner(uq, vq, uq @ matrices[target], mx[target], full[target], x, at),
                                     norm * t_norm[target])
        cos["identity"] = _cos((u * v).sum((-1, -2)).unsqueeze(-1) - _upto(((u @ x) * (v @ x)).sum(-2), at),
                               norm * identity)
        for j, k in enumerate(ks):
            out[k][name] = {key: c[..., j] for key, c in cos.items()}
    return out
