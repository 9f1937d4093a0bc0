r"""Implicit (deep-equilibrium) attention: the output is the fixed point $z^\star = f(z^\star, x)$.

The forward pass runs a fixed-point solver (``expattn.core.solvers``) without building a graph.
The backward pass uses the implicit function theorem: for a loss $\ell(z^\star)$,

$$\frac{\partial \ell}{\partial \theta} = y^\top \frac{\partial f(z^\star, x)}{\partial \theta},
\qquad y = \Big(\frac{\partial f}{\partial z}\Big)^{\!\top} y + \frac{\partial \ell}{\partial z^\star},$$

the adjoint $y$ being itself a fixed point solved with vector-Jacobian products. The phantom
gradient instead backpropagates through $k$ damped steps $z \leftarrow (1-\lambda)z +
\lambda f(z, x)$ started at $z^\star$. A block with tied weights iterated to convergence is
this layer (claim B7); one explicit attention step against the fixed point is claim D7 (seed
004 §3).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
from jaxtyping import Float
from torch import Tensor, nn

from expattn.arguments import finite_number, integer, positive_int
from expattn.core import draws
from expattn.core.solvers import SOLVERS, SolverStats, check_options, solve
from expattn.core.validate import as_tensor, check_finite, check_ndim
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig, explicit_attention
from expattn.nn.norms import NormConfig, build_norm

BACKWARDS = ("implicit", "phantom")
ON_NONCONVERGENCE = ("warn", "raise")


class NonConvergenceWarning(RuntimeWarning):
    """A forward or backward solve stopped before reaching its tolerance."""


class NonConvergenceError(RuntimeError):
    """A forward or backward solve stopped before reaching its tolerance (``on_nonconvergence="raise"``)."""


@dataclass(frozen=True)
class ImplicitConfig:
    """How ``ImplicitAttention`` solves and differentiates.

    Attributes:
        solver: forward solver name (``anderson``, ``broyden``, ``fixed_point_iter``).
        tol: forward tolerance on the relative residual.
        max_iter: forward iteration budget.
        solver_options: options of the forward solver (e.g. ``{"memory": 5}``); unknown ones raise.
        backward: ``"implicit"`` (implicit function theorem) or ``"phantom"`` (k damped steps).
        backward_solver, backward_tol, backward_max_iter, backward_options: the adjoint solve.
        phantom_steps: $k \\ge 1$ steps of the phantom gradient.
        phantom_damping: $\\lambda \\in (0, 1]$ of the phantom gradient.
        on_nonconvergence: ``"warn"`` or ``"raise"``; never silent.
    """

    solver: str = "anderson"
    tol: float = 1e-5
    max_iter: int = 100
    solver_options: dict[str, float | int] = field(default_factory=dict)
    backward: str = "implicit"
    backward_solver: str = "anderson"
    backward_tol: float = 1e-5
    backward_max_iter: int = 100
    backward_options: dict[str, float | int] = field(default_factory=dict)
    phantom_steps: int = 5
    phantom_damping: float = 1.0
    on_nonconvergence: str = "warn"

    def __post_init__(self) -> None:
        for name in ("solver", "backward_solver"):
            if getattr(self, name) not in SOLVERS:
                raise ValueError(f"{name} must be one of {sorted(SOLVERS)}, got {getattr(self, name)!r}")
        check_options(self.solver, dict(self.solver_options))
        check_options(self.backward_solver, dict(self.backward_options))
        for name in ("tol", "backward_tol"):
            finite_number(name, getattr(self, name), above=0)
        for name in ("max_iter", "backward_max_iter", "phantom_steps"):
            positive_int(name, getattr(self, name))
        if self.backward not in BACKWARDS:
            raise ValueError(f"backward must be one of {BACKWARDS}, got {self.backward!r}")
        if not 0 < self.phantom_damping <= 1:
            raise ValueError(f"phantom_damping must lie in (0, 1], got {self.phantom_damping!r}")
        if self.on_nonconvergence not in ON_NONCONVERGENCE:
            raise ValueError(f"on_nonconvergence must be one of {ON_NONCONVERGENCE}, got {self.on_nonconvergence!r}")


@dataclass
class ImplicitStats:
    """Statistics of one call: the forward solve, and the adjoint solve once backward has run."""

    forward: SolverStats
    backward: SolverStats | None = None


class InjectedAttention(nn.Module):
    r"""Attention block with input injection, the default $f$ of an implicit layer.

    $$f(z, x) = \mathrm{N}\big(x + \gamma\, \mathrm{Attn}(z)\big), \qquad
    \mathrm{Attn}(z) = W^o\big[\nabla G_h(\beta W^q_h z)\big]_h \text{ with atoms } W^k_h z,
    \text{ values } W^v_h z$$

    ``Attn`` is ``ExpFamAttention`` (softmax attention for the ``empirical`` carrier), $\mathrm N$ a
    normalization from ``expattn.nn.norms``, both chosen by registry name, and $\gamma$ a gain:
    small gains give a contraction in $z$, large ones may not.

    Args:
        dim: feature size $D$ (state and injection), divisible by ``heads``.
        heads: number of heads.
        gain: $\gamma > 0$.
        norm: normalization name (``layernorm``, ``rmsnorm``, ``sphere``, ``identity``, ...).
        carrier: carrier name (``empirical``, ``gaussian_mixture``, ...).
        carrier_options: keyword options of that carrier.
    """

    def __init__(
        self,
        dim: int,
        heads: int = 1,
        gain: float = 1.0,
        norm: str = "layernorm",
        carrier: str = "empirical",
        carrier_options: dict[str, object] | None = None,
    ) -> None:
        super().__init__()
        positive_int("dim", dim)
        positive_int("heads", heads)
        if dim % heads:
            raise ValueError(f"dim must be a multiple of heads, got dim={dim!r}, heads={heads!r}")
        finite_number("gain", gain, above=0)
        self.gain = gain
        config = ExpFamAttentionConfig(
            embed_dim=dim, num_heads=heads, bias=False, carrier=carrier, carrier_options=dict(carrier_options or {})
        )
        self.attention = ExpFamAttention(config)
        self.norm = build_norm(norm, NormConfig(dim=dim))

    def forward(
        self, z: Float[Tensor, "batch token dim"], x: Float[Tensor, "batch token dim"]
    ) -> Float[Tensor, "batch token dim"]:
        return self.norm(x + self.gain * self.attention(z))  # (B, T, D)


def spectral_radius(
    f, z: Float[Tensor, " batch *state"], *, iters: int = 50, generator: torch.Generator | None = None
) -> Float[Tensor, " batch"]:
    r"""Power-iteration estimate of $\rho(\partial f/\partial z)$ at $z$, per batch element.

    Iterates $v \leftarrow J^\top v / \lVert J^\top v\rVert$ with vector-Jacobian products ($J^\top$
    has the spectrum of $J$) and returns the geometric mean of $\lVert J^\top v\rVert$ over the last
    half of the iterations (which also converges when the dominant eigenvalues are a complex pair).

    Args:
        f: the map ``(batch, *state) -> (batch, *state)``, e.g. ``lambda z: block(z, x)``.
        z: ``(batch, *state)`` point, usually the fixed point.
        iters: number of products, ``>= 2``.
        generator: for the random start.

    Returns:
        ``(batch,)`` estimates; below 1 means $f$ is locally a contraction (claims D7, B7).
    """
    as_tensor("z", z)
    integer("iters", iters, at_least=2)
    z = z.detach().requires_grad_(True)
    with torch.enable_grad():
        fz = f(z)
    v = draws.randn(z.shape, z, generator)
    v = v / v.flatten(1).norm(dim=1).view(-1, *[1] * (z.ndim - 1))
    logs = []
    for _ in range(iters):
        (w,) = torch.autograd.grad(fz, z, v, retain_graph=True)
        norms = w.flatten(1).norm(dim=1)
        logs.append(norms.clamp_min(torch.finfo(z.dtype).tiny).log())
        v = w / norms.clamp_min(torch.finfo(z.dtype).tiny).view(-1, *[1] * (z.ndim - 1))
    return torch.stack(logs[len(logs) // 2 :]).mean(0).exp().detach()


class ImplicitAttention(nn.Module):
    r"""$z^\star = f(z^\star, x)$ for any block $f$ (an ``nn.Module`` called as ``block(z, x)``).

    ``forward(x, z0)`` returns $f(z^\star, x)$ (equal to $z^\star$ within the tolerance), attached to
    the graph so that gradients with respect to $x$ and the block's parameters follow the implicit
    function theorem (or the phantom gradient). The statistics of the last call are in
    ``last_stats`` (``forward_with_stats`` also returns them); a solve that misses its tolerance
    warns with ``NonConvergenceWarning`` or raises ``NonConvergenceError``. A batch of 0 gives the empty output
    ``block(z0, x)`` without a solve (its stats: no iteration, converged).

    Args:
        block: the map $f$; its output has the shape of $z$.
        config: ``ImplicitConfig``.

    Claims D7 (seed 004 §3) and B7 (tied weights iterated = one operator's fixed point).
    """

    def __init__(self, block: nn.Module, config: ImplicitConfig | None = None) -> None:
        super().__init__()
        if not isinstance(block, nn.Module):
            raise TypeError(f"block must be a torch.nn.Module called as block(z, x), got {type(block).__name__}")
        config = config or ImplicitConfig()
        if not isinstance(config, ImplicitConfig):
            raise TypeError(f"config must be an ImplicitConfig, got {type(config).__name__}")
        self.block, self.config = block, config
        self.last_stats: ImplicitStats | None = None

    def _report(self, stats: SolverStats, which: str) -> None:
        if stats.converged:
            return
        message = (
            f"implicit attention {which} solve ({stats.method}) did not converge: relative residual "
            f"{stats.residual:.3g} > tol {stats.tol:.3g} after {stats.iterations} iterations"
            + (" (the map returned non-finite values)" if stats.diverged else "")
        )
        if self.config.on_nonconvergence == "raise":
            raise NonConvergenceError(message)
        warnings.warn(message, NonConvergenceWarning, stacklevel=3)

    def forward_with_stats(
        self, x: Float[Tensor, " batch *input"], z0: Float[Tensor, " batch *state"] | None = None
    ) -> tuple[Float[Tensor, " batch *state"], ImplicitStats]:
        """``forward`` and its ``ImplicitStats`` (``.backward`` is filled in when backward runs)."""
        as_tensor("x", x)
        check_ndim("x", x, 1, "(batch, ...)")
        check_finite("x", x)
        if z0 is None:
            z0 = x
        as_tensor("z0", z0)
        cfg = self.config
        if not z0.shape[0]:  # batch 0: nothing to solve, an empty output (as PyTorch's modules give)
            stats = ImplicitStats(SolverStats(cfg.solver, 0, 0, 0.0, (), True, False, cfg.tol, ()))
            self.last_stats = stats
            return self.block(z0, x), stats

        def f(z: Tensor) -> Tensor:
            return self.block(z, x)

        with torch.no_grad():
            z_star, forward_stats = solve(
                f, z0.detach(), method=cfg.solver, tol=cfg.tol, max_iter=cfg.max_iter, **cfg.solver_options
            )
        stats = ImplicitStats(forward_stats)
        self.last_stats = stats
        self._report(forward_stats, "forward")
        if not torch.is_grad_enabled():
            return f(z_star), stats
        if cfg.backward == "phantom":
            z = z_star
            for _ in range(cfg.phantom_steps):
                z = (1 - cfg.phantom_damping) * z + cfg.phantom_damping * f(z)
            return z, stats
        z = f(z_star)
        if not z.requires_grad:
            return z, stats
        z_in = z.detach().requires_grad_(True)
        with torch.enable_grad():
            fz = self.block(z_in, x.detach())

        def adjoint(grad: Tensor | None) -> Tensor | None:
            if grad is None:
                return None

            def step(y: Tensor) -> Tensor:
                return torch.autograd.grad(fz, z_in, y, retain_graph=True)[0] + grad

            y, backward_stats = solve(
                step, grad, method=cfg.backward_solver, tol=cfg.backward_tol,
                max_iter=cfg.backward_max_iter, **cfg.backward_options,
            )
            stats.backward = backward_stats
            self._report(backward_stats, "backward")
            return y

        z.register_hook(adjoint)
        return z, stats

    def forward(
        self, x: Float[Tensor, " batch *input"], z0: Float[Tensor, " batch *state"] | None = None
    ) -> Float[Tensor, " batch *state"]:
        r"""$z^\star = f(z^\star, x)$, solved from ``z0`` (default ``x``; claim D7)."""
        return self.forward_with_stats(x, z0)[0]

    def jacobian_penalty(
        self, x: Float[Tensor, " batch *input"], z: Float[Tensor, " batch *state"],
        generator: torch.Generator | None = None,
    ) -> Float[Tensor, ""]:
        r"""Hutchinson estimate of $\lVert \partial f/\partial z \rVert_F^2$ per state entry at ``z`` (the fixed
        point), differentiable with respect to the block's parameters and ``x``:

        $$\hat R = \lVert \varepsilon^\top J \rVert^2 / n, \qquad \varepsilon \sim \mathcal N(0, I_n),\quad
        E\hat R = \lVert J\rVert_F^2 / n$$

        Added to a training loss it keeps $J$ small, so the fixed point stays attracting and cheap to
        solve for (Jacobian regularisation, Bai et al. 2021). Attention runs explicitly here
        (``explicit_attention``: the gradient of $\hat R$ needs a second derivative). Claim D7.
        """
        z_in = z.detach().requires_grad_(True)
        with torch.enable_grad(), explicit_attention():
            fz = self.block(z_in, x)
            eps = draws.randn(fz.shape, fz, generator)
            (vjp,) = torch.autograd.grad(fz, z_in, eps, create_graph=True)
        return vjp.pow(2).sum() / eps.numel()

    def spectral_radius(
        self, x: Float[Tensor, " batch *input"], z: Float[Tensor, " batch *state"], iters: int = 50
    ) -> Float[Tensor, " batch"]:
        r"""$\rho(\partial f/\partial z)$ at ``z`` (e.g. the fixed point), see ``spectral_radius``."""
        return spectral_radius(lambda s: self.block(s, x.detach()), z, iters=iters)


def unrolled(block: nn.Module, x: Tensor, z0: Tensor, steps: int) -> Tensor:
    r"""$z_{k+1} = f(z_k, x)$ for ``steps`` steps with the graph kept: backpropagation through the
    iterations, the reference for the implicit gradient (claim D7) and a tied-weight stack (B7)."""
    integer("steps", steps, at_least=0)
    z = z0
    for _ in range(steps):
        z = block(z, x)
    return z

