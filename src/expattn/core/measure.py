r"""The interface every intrinsic (carrier) measure implements.

A carrier measure $h$ on $\mathbb{R}^D$ generates the exponential family

$$p(x \mid \eta) = h(x)\, e^{x^\top\eta - G(\eta)}, \qquad G(\eta) = \log \int h(x)\, e^{x^\top\eta}\,dx,$$

so $G$ is the log of the Laplace transform of $h$ at $-\eta$ (seed 000 eqs. 1-2, claim A1).
Shapes: natural parameters ``eta`` are ``(*batch, query, dim)``; a measure's own parameters
carry the same ``*batch`` (without the query axis) and broadcast against it. Every method is
differentiable and keeps the dtype of its inputs.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.core.validate import as_tensor, check_finite, check_ndim


class Measure(ABC):
    """Base class: subclasses give ``log_normalizer`` and ``dim``; the rest has defaults.

    Defaults use automatic differentiation (``mean``, ``fisher``) or the identities of the
    family (``bregman``, ``kl``, ``conjugate``). Subclasses override them with closed forms.
    Subclasses also set ``dtype`` and ``batch_shape`` (of their parameters) so that ``check_eta``
    rejects natural parameters of another dtype or a batch shape that does not broadcast.
    """

    dim: int
    dtype: torch.dtype | None = None
    batch_shape: torch.Size = torch.Size()

    @abstractmethod
    def log_normalizer(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$G(\eta) = \log \int h(x) e^{x^\top \eta} dx$."""

    def check_eta(self, eta: Tensor, name: str = "eta") -> Tensor:
        """Validate natural parameters: a finite floating tensor ``(*batch, query, dim)``."""
        self.check_eta_shape(eta, name)
        check_finite(name, eta)
        self.check_domain(eta, name)
        return eta

    def check_eta_shape(self, eta: Tensor, name: str = "eta") -> Tensor:
        """``check_eta`` without its value checks: the type, shape, dtype and batch shape of ``eta``."""
        as_tensor(name, eta)
        check_ndim(name, eta, 2, "(*batch, query, dim)")
        if eta.shape[-1] != self.dim:
            raise ValueError(
                f"{name} has last dimension {eta.shape[-1]}, expected {self.dim} (the measure's dim)"
            )
        if self.dtype is not None and eta.dtype != self.dtype:
            raise TypeError(f"{name} has dtype {eta.dtype}, expected {self.dtype} (the measure's dtype)")
        try:
            torch.broadcast_shapes(eta.shape[:-2], self.batch_shape)
        except RuntimeError as err:
            raise ValueError(
                f"{name} has batch shape {tuple(eta.shape[:-2])}, which does not broadcast with the "
                f"measure's batch shape {tuple(self.batch_shape)}"
            ) from err
        return eta

    def check_domain(self, eta: Tensor, name: str) -> None:  # noqa: B027 - an optional hook, not abstract
        """Raise ``ValueError`` where $G(\\eta)$ is infinite; every $\\eta$ is valid by default."""

    def in_domain(self, eta: Tensor) -> Tensor:
        """Boolean ``(*batch, query)``: where $G(\\eta) < \\infty$."""
        return torch.ones(eta.shape[:-1], dtype=torch.bool, device=eta.device)

    def interior_point(self, like: Tensor) -> Tensor:
        """A natural parameter inside the domain, shaped like ``like`` (start of the solvers)."""
        return torch.zeros_like(like)

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$\nabla_\eta G(\eta) = E_{p(x|\eta)}[x]$ (claim A2); by autograd unless overridden."""
        with torch.enable_grad():
            eta_ = eta if eta.requires_grad else eta.detach().requires_grad_(True)
            value = self.log_normalizer(eta_).sum()
            (grad,) = torch.autograd.grad(value, eta_, create_graph=torch.is_grad_enabled())
        return grad

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\nabla^2_\eta G(\eta) = \operatorname{Cov}_{p(x|\eta)}[x]$ (claim A8); autograd default."""
        with torch.enable_grad():
            eta_ = eta.detach().requires_grad_(True)
            grad = self.mean(eta_)
            rows = [
                torch.autograd.grad(grad[..., i].sum(), eta_, retain_graph=True)[0]
                for i in range(self.dim)
            ]
        return torch.stack(rows, dim=-2)

    def expected_log_base(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$E_{p(x|\eta)}[\log h(x)]$, the term that offsets the entropy in $G^*$ (claim A10)."""
        raise NotImplementedError(f"{type(self).__name__} has no expected_log_base")

    def entropy(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$H(p(\cdot|\eta)) = G(\eta) - \eta^\top\nabla G(\eta) - E_p[\log h(x)]$."""
        return (
            self.log_normalizer(eta)
            - (eta * self.mean(eta)).sum(-1)
            - self.expected_log_base(eta)
        )

    def bregman(
        self, eta_a: Float[Tensor, "*batch query dim"], eta_b: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*batch query"]:
        r"""$B_G(a, b) = G(a) - G(b) - \nabla G(b)^\top (a - b)$, which equals
        $\mathrm{KL}(p(\cdot|b)\,\|\,p(\cdot|a))$ (claim A9; seed 000 prints the reverse order)."""
        return (
            self.log_normalizer(eta_a)
            - self.log_normalizer(eta_b)
            - (self.mean(eta_b) * (eta_a - eta_b)).sum(-1)
        )

    def kl(
        self, eta_a: Float[Tensor, "*batch query dim"], eta_b: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*batch query"]:
        r"""$\mathrm{KL}(p(\cdot|a)\,\|\,p(\cdot|b)) = B_G(b, a)$ within one family."""
        return self.bregman(eta_b, eta_a)

    def conjugate(
        self,
        m: Float[Tensor, "*batch query dim"],
        max_iter: int = 100,
        tol: float = 1e-10,
    ) -> tuple[Float[Tensor, "*batch query"], Float[Tensor, "*batch query dim"]]:
        r"""Convex conjugate $G^*(m) = \sup_\eta\, \eta^\top m - G(\eta)$ and its maximiser.

        The maximiser solves $\nabla G(\eta^*) = m$ (seed 000 eq. 6, claim A10). Default: damped
        Newton steps with the Fisher matrix as Hessian and a backtracking line search that stays
        inside the domain. Returns ``(value, eta_star)``; raises ``ValueError`` if ``m`` is not
        reachable (outside the closure of the mean space) within ``max_iter`` steps.
        """
        from expattn.core.newton import maximise_concave

        return maximise_concave(self, m, max_iter=max_iter, tol=tol)
