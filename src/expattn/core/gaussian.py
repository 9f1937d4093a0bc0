r"""The Gaussian carrier $h = \mathcal{N}(\mu, \Sigma)$: its family is a shifted Gaussian.

$$G(\eta) = \mu^\top\eta + \tfrac12\,\eta^\top\Sigma\,\eta, \qquad \nabla G(\eta) = \mu + \Sigma\eta,
\qquad p(x \mid \eta) = \mathcal{N}(x;\ \mu + \Sigma\eta,\ \Sigma)$$

The carrier is a normalised density, so $G(0) = 0$ and no constant is dropped (claim A5, seed 000
Cor. 1). The map $\eta \mapsto \nabla G$ is affine, which is why the Gaussian is the one carrier for
which the attention update is exactly linear (claims A11, B5).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import positive_int
from expattn.core import draws
from expattn.core.measure import Measure
from expattn.core.validate import as_tensor, check_finite, check_ndim, check_positive_definite, working


def _quad(matrix: Tensor, vector: Tensor) -> Tensor:
    """$v^\\top M v$ over the last axis: ``(..., D, D)`` and ``(..., D)`` -> ``(...)``."""
    return (vector * (matrix @ vector.unsqueeze(-1)).squeeze(-1)).sum(-1)


def gaussian_log_density(x: Tensor, loc: Tensor, chol: Tensor) -> Tensor:
    r"""$\log\mathcal{N}(x; m, LL^\top)$ with broadcasting: ``x``, ``loc`` ``(..., D)``, ``chol`` ``(..., D, D)``."""
    out_dtype = x.dtype
    diff = working(x - loc).unsqueeze(-1).to(chol.dtype)  # (..., D, 1); float32 for half precision
    chol = chol.expand(*torch.broadcast_shapes(diff.shape[:-2], chol.shape[:-2]), *chol.shape[-2:])
    white = torch.linalg.solve_triangular(chol, diff.expand(*chol.shape[:-2], *diff.shape[-2:]), upper=False)
    log_det = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
    dim = x.shape[-1]
    return (-0.5 * (white.squeeze(-1).pow(2).sum(-1) + log_det + dim * math.log(2 * math.pi))).to(out_dtype)


class Gaussian(Measure):
    r"""Carrier $h(x) = \mathcal{N}(x; \mu, \Sigma)$ (claim A5).

    Args:
        mean: ``(*batch, dim)`` the carrier's mean $\mu$.
        covariance: ``(*batch, dim, dim)`` symmetric positive definite $\Sigma$.

    The batch shapes of the two broadcast; natural parameters are ``(*batch, query, dim)``.
    """

    def __init__(self, mean: Float[Tensor, "*batch dim"], covariance: Float[Tensor, "*batch dim dim"]) -> None:
        as_tensor("mean", mean)
        check_ndim("mean", mean, 1, "(*batch, dim)")
        check_finite("mean", mean)
        as_tensor("covariance", covariance)
        dim = mean.shape[-1]
        if covariance.ndim < 2 or covariance.shape[-2:] != (dim, dim):
            raise ValueError(f"covariance must have shape (*batch, {dim}, {dim}), got {tuple(covariance.shape)}")
        if covariance.dtype != mean.dtype:
            raise TypeError(f"covariance has dtype {covariance.dtype}, expected {mean.dtype} like mean")
        try:
            self.batch_shape = torch.broadcast_shapes(mean.shape[:-1], covariance.shape[:-2])
        except RuntimeError as err:
            raise ValueError(
                f"mean batch shape {tuple(mean.shape[:-1])} and covariance batch shape "
                f"{tuple(covariance.shape[:-2])} do not broadcast"
            ) from err
        self.chol = check_positive_definite("covariance", covariance)
        self.loc = mean
        self.covariance = covariance
        self.dim = dim
        self.dtype = mean.dtype

    def _loc(self) -> Tensor:
        return self.loc.unsqueeze(-2)  # (*B, 1, D)

    def _cov(self) -> Tensor:
        return self.covariance.unsqueeze(-3)  # (*B, 1, D, D)

    def log_normalizer(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$G(\eta) = \mu^\top\eta + \frac12\eta^\top\Sigma\eta$ (claim A5)."""
        self.check_eta(eta)
        return (eta * self._loc()).sum(-1) + 0.5 * _quad(self._cov(), eta)

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$\nabla G(\eta) = \mu + \Sigma\eta$ (seed 000 Cor. 1)."""
        self.check_eta(eta)
        return self._loc() + (self._cov() @ eta.unsqueeze(-1)).squeeze(-1)

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\nabla^2 G(\eta) = \Sigma$, the same for every $\eta$ (claim A8)."""
        self.check_eta(eta)
        batch = torch.broadcast_shapes(eta.shape[:-1], self._cov().shape[:-2])
        return self._cov().expand(*batch, self.dim, self.dim)

    def log_prob(
        self, x: Float[Tensor, "*sample query dim"], eta: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*sample query"]:
        r"""$\log p(x|\eta) = \log\mathcal{N}(x; \mu + \Sigma\eta, \Sigma)$; ``x`` broadcasts against ``eta``."""
        as_tensor("x", x)
        check_finite("x", x)
        return gaussian_log_density(x, self.mean(eta), self.chol.unsqueeze(-3))

    def sample(
        self,
        eta: Float[Tensor, "*batch query dim"],
        num_samples: int,
        generator: torch.Generator | None = None,
    ) -> Float[Tensor, "sample *batch query dim"]:
        r"""Draws $x = \mu + \Sigma\eta + L z$, $z \sim \mathcal{N}(0, I)$, $LL^\top = \Sigma$."""
        positive_int("num_samples", num_samples)
        loc = self.mean(eta)  # (*B, Q, D)
        z = draws.randn((num_samples, *loc.shape), loc, generator)
        return loc + (self.chol.unsqueeze(-3).to(z.dtype) @ z.unsqueeze(-1)).squeeze(-1)

    def _log_det(self) -> Tensor:
        return 2 * torch.log(torch.diagonal(self.chol, dim1=-2, dim2=-1)).sum(-1)  # (*B,)

    def entropy(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$H = \frac12\log\det(2\pi e\,\Sigma)$, independent of $\eta$."""
        self.check_eta(eta)
        value = 0.5 * (self.dim * (1 + math.log(2 * math.pi)) + self._log_det())
        return value.unsqueeze(-1).expand(torch.broadcast_shapes(eta.shape[:-1], (*value.shape, 1)))

    def expected_log_base(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$E_{p(x|\eta)}[\log h(x)] = -\frac12\left(D\log 2\pi + \log\det\Sigma + D + \eta^\top\Sigma\eta\right)$."""
        self.check_eta(eta)
        constant = self.dim * (math.log(2 * math.pi) + 1) + self._log_det().unsqueeze(-1)
        return -0.5 * (constant + _quad(self._cov(), eta))

    def bregman(
        self, eta_a: Float[Tensor, "*batch query dim"], eta_b: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*batch query"]:
        r"""$B_G(a, b) = \frac12 (a - b)^\top\Sigma(a - b)$, symmetric in $a, b$ (claim A9), so also the KL (``kl``)."""
        self.check_eta(eta_a, "eta_a")
        self.check_eta(eta_b, "eta_b")
        return 0.5 * _quad(self._cov(), eta_a - eta_b)

    def conjugate(
        self,
        m: Float[Tensor, "*batch query dim"],
        max_iter: int = 100,
        tol: float = 1e-10,
    ) -> tuple[Float[Tensor, "*batch query"], Float[Tensor, "*batch query dim"]]:
        r"""$G^*(m) = \frac12 (m - \mu)^\top\Sigma^{-1}(m - \mu)$, attained at $\eta^* = \Sigma^{-1}(m - \mu)$.

        Closed form (claim A10); ``max_iter`` and ``tol`` are accepted for the common signature.
        Returns ``(value, eta_star)``.
        """
        self.check_eta(m, "m")
        diff = m - self._loc()  # (*B, Q, D)
        chol = self.chol.unsqueeze(-3)
        chol = chol.expand(*torch.broadcast_shapes(diff.shape[:-1], chol.shape[:-2]), self.dim, self.dim)
        rhs = diff.expand(*chol.shape[:-1]).unsqueeze(-1).to(chol.dtype)
        eta_star = torch.cholesky_solve(rhs, chol).squeeze(-1).to(diff.dtype)
        return 0.5 * (diff * eta_star).sum(-1), eta_star
