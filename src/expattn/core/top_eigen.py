r"""The top-$k$ eigenpairs of a batch of symmetric matrices without a full eigendecomposition.

$$M x_i = \theta_i x_i,\qquad \theta_1 \ge \dots \ge \theta_k,\qquad k \ll n$$

Locally optimal block preconditioned conjugate gradient without a preconditioner (LOBPCG, Knyazev 2001): each
step runs Rayleigh-Ritz on the span of the current block $X$ (``block`` columns), its residuals
$R = MX - X\Theta$ and the previous step's update $P$, a ``(3 block)``-wide symmetric eigenproblem per matrix, so
the cost per step is three products with $M$'s $n \times n$ entries per column, $O(n^2\,\text{block})$, where a
full ``eigh`` costs $\sim 9n^3$ and runs poorly on a GPU. The span is orthonormalised by Householder QR, which
stays orthonormal when $R$ or $P$ has become dependent on $X$ (the extra directions are then arbitrary and only
add Ritz values below the wanted ones). A block wider than $k$ (``block`` $= 2k + 2$) makes the convergence rate
depend on the gap from $\theta_k$ to $\theta_{\text{block}+1}$, not to $\theta_{k+1}$.

**Convergence rule.** Eigenpair $i \le k$ of matrix $b$ has converged when
$\lVert M x_i - \theta_i x_i\rVert_2 \le \text{tol}\,\lVert M\rVert_F$; the iteration stops once every wanted
pair of every matrix has, or after ``max_iter`` steps. The residual bounds the eigenvalue's error by
$\text{tol}\,\lVert M\rVert_F$ and, for an isolated eigenvalue, the eigenvector's angle by that over the gap; the
projector on the top-$k$ span is accurate in the same sense when $\theta_k > \theta_{k+1}$ stands clear of the
tolerance. ``converged`` says which matrices met the rule, so a caller can record the others as an outcome.
Computed in float64 whatever ``m``'s dtype (the residual rule then sees $m$'s own rounding, not the solver's).

**Where LOBPCG runs.** ``method="auto"`` decomposes whole matrices on devices in ``DENSE_DEVICES`` when their side
is below ``DENSE_BELOW``, and runs LOBPCG otherwise: on other devices (CUDA, where ``eigh`` is slow and batched
products fast) and on wide matrices everywhere. ``DENSE_BELOW`` is the crossover ``benchmarks/bench_top_eigen.py``
measured on this project's CPU machine (one thread, batches of 4 covariances with a power-law spectrum): LOBPCG is
faster from side 96 on for k = 1 and from 192 on for k = 5, and 4-12 times faster at sides 576-2048
(benchmarks/RESULTS.md). A spectrum whose top gaps are tiny needs more iterations: callers with such matrices choose
``method`` themselves (E4/E9's Fisher readings decompose whole on the CPU). ``tests/unit/test_probe_cost.py``
empties ``DENSE_DEVICES`` to check the accelerator path's cost on the CPU; ``tests/unit/test_analysis_launches.py``
counts its host reads on a stand-in device: one per iteration (the projection and the convergence flag read in
one transfer) and one to start.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from expattn.arguments import finite_number, positive_int

TOL = 1e-5
DENSE_DEVICES = {"cpu"}  # device types where method="auto" decomposes matrices narrower than DENSE_BELOW whole
DENSE_BELOW = 160  # the measured crossover on the CPU, between k = 1's (96) and k = 5's (192) (module docstring)
MAX_ITER = 300


@dataclass(frozen=True)
class TopEigen:
    """The result of ``top_eigen``.

    Attributes:
        values: $\\theta_1 \\ge \\dots \\ge \\theta_k$, ``(*batch, k)`` float64.
        vectors: $x_1, \\dots, x_k$ as columns, ``(*batch, n, k)`` float64, orthonormal.
        residuals: $\\lVert Mx_i - \\theta_i x_i\\rVert_2 / \\lVert M\\rVert_F$, ``(*batch, k)``.
        converged: every wanted pair met the tolerance, ``(*batch,)``.
        iterations: steps taken (the same for the whole batch).
    """

    values: Float[Tensor, "*batch k"]
    vectors: Float[Tensor, "*batch n k"]
    residuals: Float[Tensor, "*batch k"]
    converged: Bool[Tensor, " *batch"]
    iterations: int


def _host(small: Tensor, met: Tensor | None = None) -> tuple[Tensor, bool]:
    """``small`` ``(*batch, s, s)`` symmetrised and, with it, the flag ``met`` (0-dim bool) read to the host in one
    transfer: the iteration's only host read."""
    small = (small + small.mT) / 2
    if met is None:
        return small.cpu(), False
    host = torch.cat([small.flatten(), met.to(small.dtype).view(1)]).cpu()
    return host[:-1].view(small.shape), bool(host[-1])


def _ritz(small: Tensor, basis: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """Rayleigh-Ritz on an orthonormal ``basis`` ``(*batch, n, s)`` from its projection ``small`` $= B^\top M B$
    ``(*batch, s, s)`` on the host: the top ``width`` Ritz values (descending) and vectors ``(*batch, n, width)`` on
    ``basis``'s device. The small problems are solved on the host, in one batched LAPACK call: CUDA's batched
    ``eigh`` decomposes one matrix at a time above side 32 (cuSOLVER's batched Jacobi stops there; LOBPCG's ``s`` is
    ``3 block`` = 36 for k = 5), and each step reads its projection to the host with its convergence flag."""
    theta, y = torch.linalg.eigh(small)  # (*batch, s): ascending
    theta, y = theta.to(basis.device), y.to(basis.device)
    return theta.flip(-1)[..., :width], (basis @ y.flip(-1))[..., :width]


def top_pairs(m: Float[Tensor, "*batch n n"], values: Float[Tensor, "*batch n"], vectors: Float[Tensor, "*batch n n"],
              k: int, tol: float = TOL) -> TopEigen:
    """The ``k`` largest eigenpairs of symmetric ``m`` from its whole decomposition ``values`` (ascending, as
    ``torch.linalg.eigh`` returns them) and ``vectors`` (columns), with the residuals of ``top_eigen``'s rule read
    on ``m`` itself (float64): a decomposition of another matrix than ``m`` shows as unconverged."""
    m = m.to(torch.float64)
    theta, x = values[..., -k:].flip(-1).to(torch.float64), vectors[..., -k:].flip(-1).to(torch.float64)
    scale = torch.linalg.matrix_norm(m).clamp_min(torch.finfo(torch.float64).tiny).unsqueeze(-1)  # (*batch, 1)
    residual = torch.linalg.vector_norm(m @ x - x * theta.unsqueeze(-2), dim=-2) / scale
    return TopEigen(theta, x, residual, (residual <= tol).all(-1), 0)


def top_eigen(m: Float[Tensor, "*batch n n"], k: int, gen: torch.Generator, tol: float = TOL,
              max_iter: int = MAX_ITER, method: str = "auto") -> TopEigen:
    """The ``k`` largest eigenpairs of each symmetric ``m`` ``(*batch, n, n)`` (only ``sym(m)`` is read) by
    LOBPCG (see module docstring), on ``m``'s device; the start block is Gaussian, drawn on the CPU from ``gen``
    (the same draw on every device). ``method``: ``lobpcg``, ``dense`` (one whole ``eigh``) or ``auto`` (dense on
    ``DENSE_DEVICES`` below side ``DENSE_BELOW``). Raises ``ValueError`` unless ``1 <= k <= n`` and ``method`` is
    one of the three."""
    k = positive_int("k", k)
    n = m.shape[-1]
    if m.ndim < 2 or m.shape[-2] != n:
        raise ValueError(f"m must be a batch of square matrices (*batch, n, n), got shape {tuple(m.shape)}")
    if k > n:
        raise ValueError(f"k must be at most the matrices' side {n}, got {k}")
    tol = finite_number("tol", tol, at_least=0.0)
    max_iter = positive_int("max_iter", max_iter)
    m = m.to(torch.float64)
    m = (m + m.mT) / 2
    if method not in ("auto", "lobpcg", "dense"):
        raise ValueError(f"method must be auto, lobpcg or dense, got {method!r}")
    dense = method == "dense" or (method == "auto" and m.device.type in DENSE_DEVICES and n < DENSE_BELOW)
    block = 2 * k + 2
    if dense or 3 * block >= n:  # Rayleigh-Ritz as wide as the matrix, or a narrow one on a CPU: decompose it whole
        return top_pairs(m, *torch.linalg.eigh(m), k, tol)
    scale = torch.linalg.matrix_norm(m).clamp_min(torch.finfo(torch.float64).tiny).unsqueeze(-1)  # (*batch, 1)
    start = torch.randn(*m.shape[:-2], n, block, generator=gen, dtype=torch.float64).to(m.device)
    basis = torch.linalg.qr(start).Q
    theta, x = _ritz(_host(basis.mT @ m @ basis)[0], basis, block)
    p = None
    steps = 0
    while steps < max_iter:
        steps += 1
        mx = m @ x
        r = mx - x * theta.unsqueeze(-2)  # (*batch, n, block)
        residual = torch.linalg.vector_norm(r[..., :k], dim=-2) / scale
        parts = [x, r / torch.linalg.vector_norm(r, dim=-2, keepdim=True).clamp_min(1e-300)]
        if p is not None:
            parts.append(p / torch.linalg.vector_norm(p, dim=-2, keepdim=True).clamp_min(1e-300))
        basis = torch.linalg.qr(torch.cat(parts, -1)).Q
        small, met = _host(basis.mT @ m @ basis, (residual <= tol).all())  # the step's one host read
        if met:  # converged at the current block: the new basis goes unused
            break
        theta_new, x_new = _ritz(small, basis, block)
        p = x_new - x @ (x.mT @ x_new)  # the update, without its part along the old block
        theta, x = theta_new, x_new
    mx = m @ x[..., :k]
    residual = torch.linalg.vector_norm(mx - x[..., :k] * theta[..., :k].unsqueeze(-2), dim=-2) / scale
    return TopEigen(theta[..., :k], x[..., :k], residual, (residual <= tol).all(-1), steps)
