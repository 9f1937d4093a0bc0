r"""Carriers that are themselves exponential families (claim A4, seed 000 Prop. 1b).

If $h(x) = p_0(x \mid \eta_1, \eta_2) = h_0(x)\, e^{x^\top\eta_1 + u_2(x)\cdot\eta_2 - \log Z_0(\eta_1, \eta_2)}$ then
tilting by $e^{x^\top\eta}$ stays in the same family:

$$G(\eta) = \log Z_0(\eta_1 + \eta, \eta_2) - \log Z_0(\eta_1, \eta_2), \qquad
\nabla G(\eta) = E_{p_0(x \mid \eta_1 + \eta,\ \eta_2)}[x].$$

Three families, all with $h_0 = 1$ (Lebesgue or counting measure on the support):
``TiltedGaussian`` ($u_2 = xx^\top$), ``TiltedGamma`` ($x > 0$, $u_2 = \log x$, independent coordinates)
and ``TiltedLattice`` (a finite grid per coordinate, $u_2 = x^2$: a discretised Gaussian).
"""

from __future__ import annotations

import math
from abc import abstractmethod

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import positive_int
from expattn.core.gaussian import Gaussian
from expattn.core.measure import Measure
from expattn.core.validate import as_tensor, check_finite, check_ndim, check_positive_definite


class Tilted(Measure):
    r"""Base of the tilted carriers: subclasses give $\log Z_0$, $u_2$ and the support.

    ``eta1`` is ``(*batch, dim)``; ``eta2`` is ``(*batch, *event)`` with ``event_ndim`` trailing dims.
    """

    event_ndim = 1

    def __init__(self, eta1: Tensor, eta2: Tensor) -> None:
        as_tensor("eta1", eta1)
        check_ndim("eta1", eta1, 1, "(*batch, dim)")
        check_finite("eta1", eta1)
        as_tensor("eta2", eta2)
        check_ndim("eta2", eta2, self.event_ndim, f"(*batch, {self.event_ndim} event dims)")
        check_finite("eta2", eta2)
        if eta2.dtype != eta1.dtype:
            raise TypeError(f"eta2 has dtype {eta2.dtype}, expected {eta1.dtype} like eta1")
        try:
            self.batch_shape = torch.broadcast_shapes(eta1.shape[:-1], eta2.shape[: eta2.ndim - self.event_ndim])
        except RuntimeError as err:
            raise ValueError(
                f"eta1 {tuple(eta1.shape)} and eta2 {tuple(eta2.shape)} batch shapes do not broadcast"
            ) from err
        self.eta1, self.eta2 = eta1, eta2
        self.dim = eta1.shape[-1]
        self.dtype = eta1.dtype

    @abstractmethod
    def log_partition(self, theta1: Tensor, theta2: Tensor) -> Tensor:
        r"""$\log Z_0(\theta_1, \theta_2)$: ``(*B, Q, D)`` and ``(*B, Q or 1, *event)`` -> ``(*B, Q)``."""

    @abstractmethod
    def statistic(self, x: Tensor) -> Tensor:
        """The second sufficient statistic $u_2(x)$, ``(..., D)`` -> ``(..., *event)``."""

    @abstractmethod
    def in_support(self, x: Tensor) -> Tensor:
        """Boolean ``(...)``: where $h_0(x) > 0$."""

    def _theta(self, eta: Tensor) -> tuple[Tensor, Tensor]:
        """Parameters of the tilted distribution, $(\\eta_1 + \\eta, \\eta_2)$ with a query axis."""
        eta2 = self.eta2.unsqueeze(self.eta2.ndim - self.event_ndim)  # (*B, 1, *event)
        return self.eta1.unsqueeze(-2) + eta, eta2

    def log_normalizer(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$G(\eta) = \log Z_0(\eta_1 + \eta, \eta_2) - \log Z_0(\eta_1, \eta_2)$ (claim A4)."""
        self.check_eta(eta)
        theta1, eta2 = self._theta(eta)
        return self.log_partition(theta1, eta2) - self.log_partition(self.eta1.unsqueeze(-2), eta2)

    def tilted_moments(
        self, eta: Float[Tensor, "*batch query dim"]
    ) -> tuple[Float[Tensor, "*batch query dim"], Tensor]:
        r"""$(E[x], E[u_2(x)])$ under $p_0(\cdot|\eta_1 + \eta, \eta_2)$, as gradients of $\log Z_0$."""
        self.check_eta(eta)
        theta1, eta2 = self._theta(eta)
        with torch.enable_grad():
            t1 = theta1 if theta1.requires_grad else theta1.detach().requires_grad_(True)
            t2 = eta2.expand(*theta1.shape[:-1], *eta2.shape[eta2.ndim - self.event_ndim :])
            t2 = t2 if t2.requires_grad else t2.detach().requires_grad_(True)
            value = self.log_partition(t1, t2).sum()
            # keep the graph only when someone can differentiate the moments
            differentiable = eta.requires_grad or self.eta1.requires_grad or self.eta2.requires_grad
            create_graph = torch.is_grad_enabled() and differentiable
            grads = torch.autograd.grad(value, (t1, t2), create_graph=create_graph)
        return grads[0], grads[1]

    def expected_log_base(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$E[\log h(x)] = \eta_1^\top E[x] + \eta_2\cdot E[u_2(x)] - \log Z_0(\eta_1, \eta_2)$ (as $h_0 = 1$)."""
        mean_x, mean_u2 = self.tilted_moments(eta)
        _, eta2 = self._theta(eta)
        event = tuple(range(-self.event_ndim, 0))
        return (
            (self.eta1.unsqueeze(-2) * mean_x).sum(-1)
            + (eta2 * mean_u2).sum(event)
            - self.log_partition(self.eta1.unsqueeze(-2), eta2)
        )

    def log_prob(
        self, x: Float[Tensor, "*sample query dim"], eta: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*sample query"]:
        r"""$\log p(x|\eta) = x^\top(\eta_1 + \eta) + u_2(x)\cdot\eta_2 - \log Z_0(\eta_1 + \eta, \eta_2)$;
        $-\infty$ off the support."""
        as_tensor("x", x)
        check_finite("x", x)
        theta1, eta2 = self._theta(eta)
        event = tuple(range(-self.event_ndim, 0))
        inside = self.in_support(x)
        safe = torch.where(inside.unsqueeze(-1), x, self.support_point(x))
        value = (safe * theta1).sum(-1) + (self.statistic(safe) * eta2).sum(event) - self.log_partition(theta1, eta2)
        return value.masked_fill(~inside, -torch.inf)

    def support_point(self, like: Tensor) -> Tensor:
        """A point of the support shaped like ``like`` (stands in for points outside it)."""
        return torch.zeros_like(like)


class TiltedGaussian(Tilted):
    r"""$p_0 \propto e^{x^\top\eta_1 + \langle xx^\top, \eta_2\rangle}$ on $\mathbb{R}^D$: the Gaussian
    $\mathcal{N}(\Lambda^{-1}\eta_1, \Lambda^{-1})$ with precision $\Lambda = -2\eta_2$ (seed 000 Cor. 1's proof).

    Args:
        eta1: ``(*batch, dim)``.
        eta2: ``(*batch, dim, dim)`` symmetric negative definite.
    """

    event_ndim = 2

    def __init__(self, eta1: Float[Tensor, "*batch dim"], eta2: Float[Tensor, "*batch dim dim"]) -> None:
        super().__init__(eta1, eta2)
        if eta2.shape[-2:] != (self.dim, self.dim):
            raise ValueError(f"eta2 must have shape (*batch, {self.dim}, {self.dim}), got {tuple(eta2.shape)}")
        chol = check_positive_definite("-2 * eta2 (eta2 must be negative definite)", -2 * eta2)
        self.covariance = torch.cholesky_inverse(chol)
        self.carrier = Gaussian((self.covariance @ eta1.unsqueeze(-1)).squeeze(-1), self.covariance)

    def log_partition(self, theta1: Tensor, theta2: Tensor) -> Tensor:
        r"""$\frac12\theta_1^\top\Lambda^{-1}\theta_1 + \frac D2\log 2\pi - \frac12\log\det\Lambda$ with
        $\Lambda = -2\theta_2$."""
        chol = torch.linalg.cholesky_ex(-2 * theta2)[0]  # theta2 is eta2, checked negative definite
        white = torch.linalg.solve_triangular(chol, theta1.unsqueeze(-1), upper=False).squeeze(-1)
        log_det = 2 * torch.log(torch.diagonal(chol, dim1=-2, dim2=-1)).sum(-1)
        return 0.5 * white.pow(2).sum(-1) + 0.5 * self.dim * math.log(2 * math.pi) - 0.5 * log_det

    def statistic(self, x: Tensor) -> Tensor:
        return x.unsqueeze(-1) * x.unsqueeze(-2)

    def in_support(self, x: Tensor) -> Tensor:
        return torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device)

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$\Lambda^{-1}(\eta_1 + \eta)$."""
        return self.carrier.mean(self.check_eta(eta))

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\Lambda^{-1}$."""
        return self.carrier.fisher(self.check_eta(eta))

    def sample(self, eta: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draws from $p(\\cdot|\\eta)$, ``(sample, *batch, query, dim)``."""
        return self.carrier.sample(self.check_eta(eta), num_samples, generator)


class TiltedGamma(Tilted):
    r"""Independent Gamma coordinates on $x > 0$: $p_0 \propto x^{\eta_2} e^{x\eta_1}$, i.e. shape
    $\alpha = \eta_2 + 1$, rate $\beta = -\eta_1$; $\log Z_0 = \sum_d \log\Gamma(\alpha_d) - \alpha_d\log\beta_d$.

    Args:
        eta1: ``(*batch, dim)`` negative.
        eta2: ``(*batch, dim)`` greater than -1.

    $G(\eta)$ is finite only where $\eta_1 + \eta < 0$; ``check_domain`` enforces it.
    """

    def __init__(self, eta1: Float[Tensor, "*batch dim"], eta2: Float[Tensor, "*batch dim"]) -> None:
        super().__init__(eta1, eta2)
        if eta2.shape[-1] != self.dim:
            raise ValueError(f"eta2 has last dimension {eta2.shape[-1]}, expected {self.dim} like eta1")
        if not (eta1 < 0).all():
            raise ValueError("eta1 must be negative (rate -eta1 > 0) for the Gamma carrier")
        if not (eta2 > -1).all():
            raise ValueError("eta2 must be greater than -1 (shape eta2 + 1 > 0) for the Gamma carrier")

    def in_domain(self, eta: Tensor) -> Tensor:
        return (self.eta1.unsqueeze(-2) + eta < 0).all(-1)

    def check_domain(self, eta: Tensor, name: str) -> None:
        if not self.in_domain(eta).all():
            raise ValueError(
                f"{name} must satisfy eta1 + {name} < 0 in every coordinate (the Gamma rate stays positive)"
            )

    def shape_rate(self, eta: Tensor) -> tuple[Tensor, Tensor]:
        r"""Shape $\alpha = \eta_2 + 1$ and rate $\beta = -(\eta_1 + \eta)$ of $p(\cdot|\eta)$, ``(*B, Q, D)``."""
        theta1, eta2 = self._theta(self.check_eta(eta))
        return (eta2 + 1).expand_as(theta1), -theta1

    def log_partition(self, theta1: Tensor, theta2: Tensor) -> Tensor:
        alpha = theta2 + 1
        return (torch.lgamma(alpha) - alpha * torch.log(-theta1)).sum(-1)

    def statistic(self, x: Tensor) -> Tensor:
        return torch.log(x)

    def in_support(self, x: Tensor) -> Tensor:
        return (x > 0).all(-1)

    def support_point(self, like: Tensor) -> Tensor:
        return torch.ones_like(like)

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$E[x_d] = \alpha_d / \beta_d$."""
        alpha, rate = self.shape_rate(eta)
        return alpha / rate

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\operatorname{diag}(\alpha_d / \beta_d^2)$."""
        alpha, rate = self.shape_rate(eta)
        return torch.diag_embed(alpha / rate**2)

    def sample(self, eta: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draws ``(sample, *batch, query, dim)``; reproducible from ``generator`` (it seeds a forked RNG)."""
        positive_int("num_samples", num_samples)
        alpha, rate = self.shape_rate(eta)
        seed = int(torch.randint(0, 2**62, (), generator=generator))
        # torch's Gamma sampler takes no generator: draw on the CPU under a forked, seeded RNG
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            draws = torch.distributions.Gamma(alpha.detach().cpu(), rate.detach().cpu()).sample((num_samples,))
        return draws.to(alpha.device)


class TiltedLattice(Tilted):
    r"""Independent coordinates on a finite grid $\{s_1, \dots, s_K\}$:
    $p_0(x_d = s_k) \propto e^{s_k\eta_{1d} + s_k^2\eta_{2d}}$.

    Args:
        support: ``(K,)`` distinct grid points shared by all coordinates.
        eta1, eta2: ``(*batch, dim)``; any finite values (the support is finite).
    """

    def __init__(
        self, support: Float[Tensor, " K"], eta1: Float[Tensor, "*batch dim"], eta2: Float[Tensor, "*batch dim"]
    ) -> None:
        super().__init__(eta1, eta2)
        as_tensor("support", support)
        check_finite("support", support)
        if support.ndim != 1 or support.numel() < 2:
            raise ValueError(f"support must be a 1-D tensor of at least 2 points, got shape {tuple(support.shape)}")
        if support.unique().numel() != support.numel():
            raise ValueError("support points must be distinct")
        if support.dtype != eta1.dtype:
            raise TypeError(f"support has dtype {support.dtype}, expected {eta1.dtype} like eta1")
        if eta2.shape[-1] != self.dim:
            raise ValueError(f"eta2 has last dimension {eta2.shape[-1]}, expected {self.dim} like eta1")
        self.support = support

    def _grid_logits(self, theta1: Tensor, theta2: Tensor) -> Tensor:
        s = self.support
        return theta1.unsqueeze(-1) * s + theta2.unsqueeze(-1) * s**2  # (*B, Q, D, K)

    def grid_probs(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim K"]:
        r"""$p(x_d = s_k|\eta)$ per coordinate."""
        theta1, eta2 = self._theta(self.check_eta(eta))
        return torch.softmax(self._grid_logits(theta1, eta2), dim=-1)

    def log_partition(self, theta1: Tensor, theta2: Tensor) -> Tensor:
        return torch.logsumexp(self._grid_logits(theta1, theta2), dim=-1).sum(-1)

    def statistic(self, x: Tensor) -> Tensor:
        return x**2

    def in_support(self, x: Tensor) -> Tensor:
        return (x.unsqueeze(-1) == self.support).any(-1).all(-1)

    def support_point(self, like: Tensor) -> Tensor:
        return torch.full_like(like, self.support[0].item())

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$E[x_d] = \sum_k p_{dk} s_k$."""
        return self.grid_probs(eta) @ self.support

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\operatorname{diag}(\operatorname{Var}[x_d])$: the coordinates are independent."""
        p = self.grid_probs(eta)
        centred = self.support - (p @ self.support).unsqueeze(-1)  # (*B, Q, D, K)
        return torch.diag_embed((p * centred**2).sum(-1))

    def sample(self, eta: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
        """Draws ``(sample, *batch, query, dim)`` of grid points."""
        positive_int("num_samples", num_samples)
        p = self.grid_probs(eta)
        idx = torch.multinomial(p.reshape(-1, p.shape[-1]), num_samples, replacement=True, generator=generator)
        return self.support[idx.T.reshape(num_samples, *p.shape[:-1])]

