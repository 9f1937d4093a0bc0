r"""The Fisher readings' cosines (E4, E9) from each head's dense $F_h$ and its top-$k$ eigenpairs only.

A Fisher reading compares $\operatorname{sym}(u^\top v)$ (rows ``u, v`` ``(H, rows, r)`` in range coordinates) with
a per-head target $M_h$ (``(H, r, r)``: $F_h$, or $\lambda_F(F_h + \lambda_F I)^{-1}$), its rival $M'_h$, the
identity and the target's spectrum on Haar-random eigenvectors, each also with the target's top-$k$ eigenvectors
$X_k$ ``(H, r, k)`` projected out, $P = I - X_kX_k^\top$. None of it needs a full eigendecomposition:

$$\langle u^\top v, PMP\rangle = \textstyle\sum (uM)\odot v - \sum (uX)\odot(vMX) - \sum (uMX)\odot(vX)
+ \sum (uXC)\odot(vX),\qquad C = X^\top M X,$$

$$\lVert PMP\rVert_F^2 = \lVert M\rVert_F^2 - 2\lVert MX\rVert_F^2 + \lVert C\rVert_F^2,\qquad
\langle u^\top v, P\rangle = \textstyle\sum u\odot v - \sum (uX)\odot(vX),\qquad \lVert P\rVert_F^2 = r - k,$$

exact for any orthonormal $X$ (the top-$k$ eigenvectors of ``core.top_eigen``, to its residual tolerance). The
spectrum rival is $\cos(A, Q\,PMP\,Q^\top) = \cos(\operatorname{sym}((uQ)^\top vQ), PMP)$ for a Haar-random $Q$:
$QV_h$ is Haar-random as $V_hQ$ is, so this is the target's spectrum on random eigenvectors without its
eigenvectors (the trace identity of ``benchmarks/RESULTS.md``). Cost: one $(H, \text{rows}, r) \times (H, r, r)$
product per set of rows and matrix, then $O(H\,\text{rows}\,r\,k)$ per deflation.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.hypotheses.e4_readings import sym_norm


def _inner(u: Tensor, v: Tensor, um: Tensor, mx: Tensor, c: Tensor, x: Tensor) -> Tensor:
    """$\\langle u^\\top v, PMP\\rangle$ per head from ``um = u @ M``, ``mx = M @ X``, ``c = X^T M X``."""
    ux, vx = u @ x, v @ x  # (H, rows, k)
    return ((um * v).sum((-1, -2)) - (ux * (v @ mx)).sum((-1, -2)) - ((u @ mx) * vx).sum((-1, -2))
            + ((ux @ c) * vx).sum((-1, -2)))


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
    ``heads[name] = (u, v, uQ, vQ)``, rows ``(H, rows, r)`` (``rows`` may broadcast over heads)."""
    x = x.to(matrices[target].dtype)
    r = x.shape[-2]
    mx = {key: m @ x for key, m in matrices.items()}  # (H, r, K)
    full = {key: x.mT @ v for key, v in mx.items()}  # (H, K, K): X^T M X
    sq = {key: torch.linalg.matrix_norm(m).square() for key, m in matrices.items()}
    out: dict[int, dict[str, dict[str, Tensor]]] = {k: {} for k in ks}
    for name, (u, v, uq, vq) in heads.items():
        norm = sym_norm(u, v)  # the form is kept whole: one norm for every target (Q is orthogonal)
        um = {key: u @ m for key, m in matrices.items()}
        uqm = uq @ matrices[target]
        for k in ks:
            xk = x[..., :k]
            cos = {}
            for key in matrices:
                mxk, ck = mx[key][..., :k], full[key][..., :k, :k]
                t_norm = (sq[key] - 2 * mxk.square().sum((-1, -2)) + ck.square().sum((-1, -2))).clamp_min(0).sqrt()
                cos[key] = _cos(_inner(u, v, um[key], mxk, ck, xk), norm * t_norm)
                if key == target:
                    cos[f"haar_{target}"] = _cos(_inner(uq, vq, uqm, mxk, ck, xk), norm * t_norm)
            eye = (u * v).sum((-1, -2)) - ((u @ xk) * (v @ xk)).sum((-1, -2))
            cos["identity"] = _cos(eye, norm * (r - k) ** 0.5)
            out[k][name] = cos
    return out
