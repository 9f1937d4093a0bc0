r"""Fixed-point solvers $z^\star = f(z^\star)$ with one signature and documented statistics.

Every solver is a plain function ``solver(f, z0, *, tol, max_iter, **its_options)`` returning
``(z_star, SolverStats)``. The leading axis of ``z0`` is a batch of independent problems: norms,
residuals and the choice of the returned iterate are per batch element, and the solver stops once
every element meets the tolerance. The convergence test is on the relative residual

$$r(z) = \frac{\lVert f(z) - z\rVert}{\max(\lVert f(z)\rVert, \epsilon)}$$

measured at the iterate that is returned (the one of lowest residual seen, per batch element).
A relative residual can also shrink when iterates run off to infinity (a map without a fixed
point, such as $z + 2 + \sin z$, pushed by Broyden's large steps): check $\lVert z^\star\rVert$ too.
``solve(f, z0, method=..., **options)`` looks a solver up by name and rejects unknown options.

Used by ``expattn.nn.implicit`` for deep-equilibrium attention (claim D7, seed 004 §3).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import finite_number, positive_int
from expattn.core.validate import as_tensor, check_finite, working

FixedPointMap = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class SolverStats:
    """What a solve did.

    Attributes:
        method: name of the solver.
        iterations: number of times the estimate was updated (0 if ``z0`` already met ``tol``).
        evaluations: number of calls of ``f`` (each on the whole batch).
        residual: largest relative residual $r(z)$ over the batch at the returned iterate.
        residuals: the relative residual of each batch element at the returned iterate.
        converged: every batch element met ``residual <= tol``.
        diverged: an iterate or ``f`` of it was NaN or infinite; the solve stopped at the last finite iterate.
        tol: the tolerance the solve was asked for.
        trace: the largest relative residual over the batch after each evaluation of ``f``.
    """

    method: str
    iterations: int
    evaluations: int
    residual: float
    residuals: tuple[float, ...]
    converged: bool
    diverged: bool
    tol: float
    trace: tuple[float, ...]


class _Tracker:
    """Counts evaluations, keeps the lowest-residual iterate per batch element and the trace."""

    def __init__(self, f: FixedPointMap, z0: Tensor, tol: float) -> None:
        self.f, self.shape, self.tol = f, z0.shape, tol
        self.evaluations = 0
        self.diverged = False
        self.trace: list[float] = []
        self.best = z0.reshape(z0.shape[0], -1).clone()  # (B, N)
        self.best_residual = torch.full((z0.shape[0],), torch.inf, dtype=torch.float64, device=z0.device)

    def __call__(self, z: Tensor) -> Tensor | None:
        """$f(z)$ on flat ``(B, N)`` iterates; records the residual of ``z``; ``None`` if not finite."""
        if not torch.isfinite(z.sum()):  # one reduction: NaN, infinity or overflow anywhere in z
            self.diverged = True
            return None
        fz = self.f(z.reshape(self.shape))
        self.evaluations += 1
        if not isinstance(fz, Tensor) or fz.shape != self.shape:
            got = tuple(fz.shape) if isinstance(fz, Tensor) else type(fz).__name__
            raise ValueError(f"f must map z of shape {tuple(self.shape)} to the same shape, got {got}")
        fz = fz.reshape(z.shape)
        size = fz.norm(dim=1)  # non-finite iff some entry of f(z) is (or the norm overflows)
        if not torch.isfinite(size).all():
            self.diverged = True
            return None
        residual = ((fz - z).norm(dim=1) / size.clamp_min(torch.finfo(fz.dtype).tiny)).double()
        better = residual < self.best_residual
        self.best = torch.where(better[:, None], z, self.best)
        self.best_residual = torch.where(better, residual, self.best_residual)
        self.trace.append(residual.max().item())
        return fz

    @property
    def done(self) -> bool:
        return bool((self.best_residual <= self.tol).all())

    def result(self, method: str, iterations: int) -> tuple[Tensor, SolverStats]:
        residuals = tuple(self.best_residual.tolist())
        stats = SolverStats(
            method=method,
            iterations=iterations,
            evaluations=self.evaluations,
            residual=max(residuals),
            residuals=residuals,
            converged=self.done and not self.diverged,
            diverged=self.diverged,
            tol=self.tol,
            trace=tuple(self.trace),
        )
        return self.best.reshape(self.shape), stats


def _check_common(z0: Tensor, tol: float, max_iter: int) -> None:
    as_tensor("z0", z0)
    if z0.ndim < 1 or z0.shape[0] == 0:
        raise ValueError(f"z0 must have shape (batch, ...) with batch >= 1, got {tuple(z0.shape)}")
    check_finite("z0", z0)
    finite_number("tol", tol, above=0)
    positive_int("max_iter", max_iter)


def fixed_point_iter(
    f: FixedPointMap,
    z0: Float[Tensor, " batch *state"],
    *,
    tol: float = 1e-5,
    max_iter: int = 100,
    damping: float = 1.0,
) -> tuple[Float[Tensor, " batch *state"], SolverStats]:
    r"""Damped Picard iteration $z_{k+1} = (1-\lambda) z_k + \lambda f(z_k)$.

    Converges linearly with rate $\rho(I - \lambda(I - J_f))$ on a contraction.

    Args:
        f: the map, ``(batch, *state) -> (batch, *state)``.
        z0: ``(batch, *state)`` initial estimate.
        tol: tolerance on the relative residual.
        max_iter: largest number of updates.
        damping: $\lambda \in (0, 1]$.

    Returns:
        ``(z_star, stats)``; ``z_star`` has the shape of ``z0``. Claim D7.
    """
    _check_common(z0, tol, max_iter)
    if not 0 < damping <= 1:
        raise ValueError(f"damping must lie in (0, 1], got {damping!r}")
    track = _Tracker(f, z0, tol)
    z = z0.reshape(z0.shape[0], -1)
    fz = track(z)
    iterations = 0
    while fz is not None and not track.done and iterations < max_iter:
        z = (1 - damping) * z + damping * fz
        fz = track(z)
        iterations += 1
    return track.result("fixed_point_iter", iterations)


def anderson(
    f: FixedPointMap,
    z0: Float[Tensor, " batch *state"],
    *,
    tol: float = 1e-5,
    max_iter: int = 100,
    memory: int = 5,
    regularization: float = 1e-8,
    mixing: float = 1.0,
    restart: float = 4.0,
    stall: int = 15,
) -> tuple[Float[Tensor, " batch *state"], SolverStats]:
    r"""Safeguarded Anderson acceleration (type II) of the iteration $z \mapsto f(z)$, per batch element.

    With the iterates $z_i$ kept in the history, values $f_i = f(z_i)$ and residuals $g_i = f_i - z_i$:

    $$\alpha = \arg\min_{\mathbf 1^\top\alpha = 1} \Big\lVert \sum_i \alpha_i g_i \Big\rVert^2
    + \mu\,\overline{\lVert g\rVert^2}\,\lVert\alpha\rVert^2, \qquad
    z_{k+1} = \beta \sum_i \alpha_i f_i + (1-\beta)\sum_i \alpha_i z_i,$$

    one small least-squares problem per batch element, with the ridge scaled by the mean squared
    residual norm $\overline{\lVert g\rVert^2}$ of that element's history. Safeguard: when an
    element's residual norm exceeds ``restart`` times the smallest one it has had, or has not reached a
    new smallest value for ``stall`` updates, its history is cleared down to the new iterate, so its
    next update is the plain step $z \mapsto f(z)$ (where the map is strongly nonlinear, Anderson
    otherwise stagnates on stale secant information).

    Args:
        f: the map, ``(batch, *state) -> (batch, *state)``.
        z0: ``(batch, *state)`` initial estimate.
        tol: tolerance on the relative residual.
        max_iter: largest number of updates.
        memory: $m \ge 1$, largest number of past iterates mixed.
        regularization: relative ridge $\mu \ge 0$ (at least 10 machine epsilons).
        mixing: $\beta \in (0, 1]$.
        restart: growth factor $> 1$ of the residual norm over its smallest value that clears the history.
        stall: number of updates $\ge 1$ without a new smallest residual norm that clears the history.

    Returns:
        ``(z_star, stats)``; ``z_star`` has the shape of ``z0``. Claim D7.
    """
    _check_common(z0, tol, max_iter)
    positive_int("memory", memory)
    finite_number("regularization", regularization, at_least=0)
    if not 0 < mixing <= 1:
        raise ValueError(f"mixing must lie in (0, 1], got {mixing!r}")
    if not restart > 1:
        raise ValueError(f"restart must be > 1, got {restart!r}")
    positive_int("stall", stall)
    track = _Tracker(f, z0, tol)
    z = z0.reshape(z0.shape[0], -1)
    fz = track(z)
    # Ring buffers of the last `memory` iterates, values and residuals, and the residuals' Gram
    # matrix, updated one row per iteration (alpha does not depend on the order of the slots).
    # `kept` marks, per batch element, the slots that belong to its current history.
    batch, size = z.shape
    zs, fs, gs = (z.new_zeros(batch, memory, size) for _ in range(3))  # (B, m, N)
    gram = z.new_zeros(batch, memory, memory)
    kept = z.new_zeros(batch, memory)
    smallest = torch.full((batch,), torch.inf, dtype=z.dtype, device=z.device)
    since = torch.zeros(batch, dtype=torch.long, device=z.device)  # updates since the last new smallest
    ridge = max(regularization, 10 * torch.finfo(z.dtype).eps) * torch.eye(memory, dtype=z.dtype, device=z.device)
    # Bordered system [[0, c^T], [c, H]] [nu; alpha] = [1; 0] for the constrained least squares, c = kept:
    # a slot outside the history has H's row e_i and c_i = 0, hence alpha_i = 0.
    border = z.new_zeros(batch, memory + 1, memory + 1)
    rhs = z.new_zeros(batch, memory + 1, 1)
    rhs[:, 0] = 1
    iterations = 0
    while fz is not None:
        slot = iterations % memory
        g = fz - z
        size_g = (g * g).sum(-1)  # (B,) squared residual norm
        since = torch.where(size_g < smallest, 0, since + 1)
        clear = (size_g > restart**2 * smallest) | (since >= stall)
        since = torch.where(since >= stall, 0, since)
        kept = torch.where(clear[:, None], 0.0, kept)
        smallest = torch.minimum(smallest, size_g)
        zs[:, slot], fs[:, slot], gs[:, slot] = z, fz, g
        kept[:, slot] = 1
        row = (gs * g[:, None]).sum(-1)  # (B, m); faster than a batched matrix-vector product on CPU
        gram[:, slot], gram[:, :, slot] = row, row
        if track.done or iterations >= max_iter:
            break
        h = gram * kept[:, :, None] * kept[:, None, :]
        scale = h.diagonal(dim1=-2, dim2=-1).sum(-1) / kept.sum(-1)
        # alpha does not change when the Gram matrix is scaled; scaling keeps the system O(1).
        h = h / scale.clamp_min(torch.finfo(z.dtype).tiny)[:, None, None]
        border[:, 1:, 1:] = h + torch.diag_embed(1 - kept) + ridge
        border[:, 0, 1:], border[:, 1:, 0] = kept, kept
        alpha = torch.linalg.solve(working(border), working(rhs))[:, 1:].mT.to(z.dtype)  # (B, 1, m)
        z = (alpha @ fs)[:, 0]
        if mixing < 1:
            z = mixing * z + (1 - mixing) * (alpha @ zs)[:, 0]
        fz = track(z)
        iterations += 1
    return track.result("anderson", iterations)


def broyden(
    f: FixedPointMap,
    z0: Float[Tensor, " batch *state"],
    *,
    tol: float = 1e-5,
    max_iter: int = 100,
    memory: int = 64,
) -> tuple[Float[Tensor, " batch *state"], SolverStats]:
    r"""Limited-memory "good" Broyden root finding on $g(z) = f(z) - z$.

    The inverse Jacobian estimate $H \approx (J_f - I)^{-1}$ starts at $-I$ and is updated by

    $$H \leftarrow H + \frac{(\Delta z - H\Delta g)\,\Delta z^\top H}{\Delta z^\top H \Delta g},
    \qquad z \leftarrow z - H g(z),$$

    stored as $H = -I + U V^\top$ with at most ``memory`` rank-one terms (oldest dropped).

    Args:
        f: the map, ``(batch, *state) -> (batch, *state)``.
        z0: ``(batch, *state)`` initial estimate.
        tol: tolerance on the relative residual.
        max_iter: largest number of updates.
        memory: largest number of rank-one updates kept, ``>= 1``.

    Returns:
        ``(z_star, stats)``; ``z_star`` has the shape of ``z0``. Claim D7.
    """
    _check_common(z0, tol, max_iter)
    positive_int("memory", memory)
    track = _Tracker(f, z0, tol)
    z = z0.reshape(z0.shape[0], -1)
    fz = track(z)
    g = None if fz is None else fz - z
    us: list[Tensor] = []
    vs: list[Tensor] = []

    def apply_h(w: Tensor) -> Tensor:  # H w, w: (B, N)
        out = -w
        for u, v in zip(us, vs, strict=True):
            out = out + u * (v * w).sum(1, keepdim=True)
        return out

    def apply_h_transpose(w: Tensor) -> Tensor:  # H^T w
        out = -w
        for u, v in zip(us, vs, strict=True):
            out = out + v * (u * w).sum(1, keepdim=True)
        return out

    iterations = 0
    while g is not None and not track.done and iterations < max_iter:
        dz = -apply_h(g)
        z = z + dz
        fz = track(z)
        iterations += 1
        if fz is None:
            break
        g_new = fz - z
        dg = g_new - g
        h_dg = apply_h(dg)
        v = apply_h_transpose(dz)
        denom = (dz * h_dg).sum(1, keepdim=True)
        # Skip the rank-one update where the secant is rounding noise: a tiny change of g, or a
        # denominator at rounding level.
        eps = torch.finfo(z.dtype).eps
        informative = dg.norm(dim=1, keepdim=True) > eps**0.5 * g.norm(dim=1, keepdim=True)
        nonzero = denom.abs() > eps * dz.norm(dim=1, keepdim=True) * h_dg.norm(dim=1, keepdim=True)
        safe = informative & nonzero
        u = torch.where(safe, (dz - h_dg) / torch.where(safe, denom, torch.ones_like(denom)), torch.zeros_like(dz))
        us, vs = [*us, u][-memory:], [*vs, v][-memory:]
        g = g_new
    return track.result("broyden", iterations)


Solver = Callable[..., tuple[Tensor, SolverStats]]
SOLVERS: dict[str, Solver] = {"fixed_point_iter": fixed_point_iter, "anderson": anderson, "broyden": broyden}


def register_solver(name: str, solver: Solver) -> None:
    """Add ``solver(f, z0, *, tol, max_iter, **options) -> (z_star, SolverStats)`` under ``name``."""
    if name in SOLVERS:
        raise ValueError(f"a solver named {name!r} is already registered")
    params = inspect.signature(solver).parameters
    if not {"tol", "max_iter"} <= params.keys():
        raise TypeError(f"solver {name!r} must accept the keyword arguments tol and max_iter")
    SOLVERS[name] = solver


def solver_options(method: str) -> tuple[str, ...]:
    """The option names (besides ``tol`` and ``max_iter``) that solver ``method`` accepts."""
    if method not in SOLVERS:
        raise ValueError(f"method must be one of {sorted(SOLVERS)}, got {method!r}")
    params = inspect.signature(SOLVERS[method]).parameters.values()
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY and p.name not in ("tol", "max_iter"))


def check_options(method: str, options: dict[str, object]) -> None:
    """Raise ``ValueError`` naming any option that solver ``method`` does not accept."""
    allowed = solver_options(method)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for solver {method!r}; it accepts {list(allowed)}")


def solve(
    f: FixedPointMap,
    z0: Float[Tensor, " batch *state"],
    *,
    method: str = "anderson",
    tol: float = 1e-5,
    max_iter: int = 100,
    **options: float | int,
) -> tuple[Float[Tensor, " batch *state"], SolverStats]:
    r"""Solve $z^\star = f(z^\star)$ with the solver named ``method`` (see ``SOLVERS``).

    Args:
        f: the map, ``(batch, *state) -> (batch, *state)``.
        z0: ``(batch, *state)`` initial estimate.
        method: ``"anderson"``, ``"broyden"``, ``"fixed_point_iter"`` or a registered name.
        tol, max_iter: stopping rule (relative residual, largest number of updates).
        options: the solver's own options; an unknown name raises ``ValueError``.

    Returns:
        ``(z_star, stats)``. Claim D7.
    """
    check_options(method, options)
    return SOLVERS[method](f, z0, tol=tol, max_iter=max_iter, **options)
