r"""Gaussian-mixture carriers $h = \sum_n \pi_n \mathcal{N}(\mu_n, \Sigma_n)$ and their Jensen bound.

Each component contributes its Gaussian log-normalizer $G_n(\eta) = \mu_n^\top\eta + \frac12\eta^\top\Sigma_n\eta$,
so the mixture's is exact:

$$G(\eta) = \log\sum_n \pi_n e^{G_n(\eta)}, \qquad
\nabla G(\eta) = \sum_n r_n(\eta)\,(\mu_n + \Sigma_n\eta), \quad r = \operatorname{softmax}(\log\pi + G_\cdot(\eta)).$$

With a shared covariance the quadratic term leaves the softmax, and $\nabla G = \Sigma\eta +
\sum_n \operatorname{softmax}_n(\log\pi_n + \mu_n^\top\eta)\,\mu_n$: attention plus a linear term (claim
A6, seed 000 Prop. 2). With separate covariances seed 000 Prop. 3 uses Jensen's bound (claim A7).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import positive_int
from expattn.core import draws
from expattn.core.empirical import Empirical
from expattn.core.gaussian import gaussian_log_density
from expattn.core.measure import Measure
from expattn.core.validate import as_tensor, check_finite, check_ndim, check_output, check_positive_definite
from expattn.validation import validate_enabled


def _checked(name: str, value: Tensor) -> Tensor:
    """``check_output`` of a result of finite arguments (when validating): ``ValueError`` if it overflowed."""
    if validate_enabled():
        check_output(name, value, f"it overflows {value.dtype}; scale eta, means or covariance down (or compute in "
                     "a wider dtype)")
    return value


def _log_weights(weights: Tensor | None, log_weights: Tensor | None, like: Tensor) -> Tensor:
    """Validated $\\log\\pi$ ``(*batch, comp)``; default: uniform weights $1/C$."""
    comps = like.shape[-2]
    if weights is not None and log_weights is not None:
        raise ValueError("give weights or log_weights, not both")
    if weights is None and log_weights is None:
        return like.new_full(like.shape[-2:-1], -math.log(comps))
    name, value = ("weights", weights) if weights is not None else ("log_weights", log_weights)
    as_tensor(name, value)
    if value.ndim < 1 or value.shape[-1] != comps:
        raise ValueError(f"{name} has shape {tuple(value.shape)}, expected (*batch, {comps}) (one per component)")
    if value.dtype != like.dtype:
        raise TypeError(f"{name} has dtype {value.dtype}, expected {like.dtype} like means")
    check_finite(name, value)
    if log_weights is not None:
        return log_weights
    if (weights < 0).any():
        raise ValueError("weights must be non-negative")
    if not (weights > 0).any(-1).all():
        raise ValueError("weights must keep at least one positive component per mixture")
    return torch.where(weights > 0, torch.log(weights.clamp_min(torch.finfo(weights.dtype).tiny)), -torch.inf)


class GaussianMixture(Measure):
    r"""Carrier $h = \sum_n \pi_n\,\mathcal{N}(\mu_n, \Sigma_n)$ (claims A6, A7).

    Args:
        means: ``(*batch, comp, dim)`` component means $\mu_n$.
        covariance: ``(*batch, dim, dim)`` one shared $\Sigma$ (same number of dims as ``means``) or
            ``(*batch, comp, dim, dim)`` one per component (one more dim than ``means``).
        weights: ``(*batch, comp)`` non-negative $\pi_n$ (need not sum to one), or
        log_weights: ``(*batch, comp)`` finite $\log\pi_n$. Neither: $\pi_n = 1/C$.
    """

    def __init__(
        self,
        means: Float[Tensor, "*batch comp dim"],
        covariance: Float[Tensor, "*batch dim dim"] | Float[Tensor, "*batch comp dim dim"],
        weights: Float[Tensor, "*batch comp"] | None = None,
        log_weights: Float[Tensor, "*batch comp"] | None = None,
    ) -> None:
        as_tensor("means", means)
        check_ndim("means", means, 2, "(*batch, comp, dim)")
        if means.shape[-2] == 0:
            raise ValueError("means must hold at least one component, got an empty comp axis")
        check_finite("means", means)
        as_tensor("covariance", covariance)
        comps, dim = means.shape[-2:]
        if covariance.ndim not in (means.ndim, means.ndim + 1) or covariance.shape[-2:] != (dim, dim):
            raise ValueError(
                f"covariance must be (*batch, {dim}, {dim}) shared or (*batch, {comps}, {dim}, {dim}) "
                f"per component, got {tuple(covariance.shape)} for means {tuple(means.shape)}"
            )
        self.shared = covariance.ndim == means.ndim
        if not self.shared and covariance.shape[-3] not in (1, comps):
            raise ValueError(f"covariance has {covariance.shape[-3]} components, expected {comps} like means")
        if covariance.dtype != means.dtype:
            raise TypeError(f"covariance has dtype {covariance.dtype}, expected {means.dtype} like means")
        chol = check_positive_definite("covariance", covariance)
        self.log_weights = _log_weights(weights, log_weights, means)
        if self.shared:
            kept = torch.isfinite(self.log_weights)  # zero weights are masked atoms
            self._attention = Empirical(
                means, self.log_weights.masked_fill(~kept, 0.0), None if bool(kept.all()) else kept
            )
        # per-component views (*batch, comp or 1, dim, dim)
        self.component_covariance = covariance.unsqueeze(-3) if self.shared else covariance
        self.component_chol = chol.unsqueeze(-3) if self.shared else chol
        self.covariance = covariance
        self.means = means
        self.dim = dim
        self.dtype = means.dtype
        try:
            self.batch_shape = torch.broadcast_shapes(
                means.shape[:-2], self.component_covariance.shape[:-3], self.log_weights.shape[:-1]
            )
        except RuntimeError as err:
            raise ValueError("means, covariance and weights have batch shapes that do not broadcast") from err

    def component_log_normalizers(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query comp"]:
        r"""$G_n(\eta) = \mu_n^\top\eta + \frac12\eta^\top\Sigma_n\eta$ for every component."""
        self.check_eta(eta)
        linear = eta @ self.means.mT  # (*B, Q, C)
        cov_eta = self.component_covariance.unsqueeze(-4) @ eta[..., None, :, None]  # (*B, Q, C or 1, D, 1)
        quadratic = 0.5 * (eta.unsqueeze(-2) * cov_eta.squeeze(-1)).sum(-1)  # (*B, Q, C or 1)
        return _checked("mu_n . eta + eta^T Sigma_n eta / 2", linear + quadratic)

    def component_means(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query comp dim"]:
        r"""$\mu_n + \Sigma_n\eta$: each component's tilted mean."""
        cov_eta = (self.component_covariance.unsqueeze(-4) @ eta[..., None, :, None]).squeeze(-1)
        return self.means.unsqueeze(-3) + cov_eta  # (*B, Q, C, D)

    def _logits(self, eta: Tensor) -> Tensor:
        r"""$\log\pi_n + G_n(\eta)$ ``(*B, Q, C)`` up to a constant per query: with a shared $\Sigma$ the
        common $\frac12\eta^\top\Sigma\eta$ is left out (softmax ignores it; it could only overflow)."""
        if self.shared:
            return self._attention.logits(eta)
        return self.log_weights.unsqueeze(-2) + self.component_log_normalizers(eta)

    def responsibilities(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query comp"]:
        r"""$r_n(\eta) = \operatorname{softmax}_n(\log\pi_n + G_n(\eta))$: component weights of $p(\cdot|\eta)$."""
        return torch.softmax(self._logits(eta), dim=-1)

    def log_normalizer(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$G(\eta) = \operatorname{logsumexp}_n(\log\pi_n + G_n(\eta))$, exact (claims A6, A7)."""
        log_z = torch.logsumexp(self._logits(eta), dim=-1)
        if not self.shared:
            return log_z
        quadratic = 0.5 * (eta * (self.covariance.unsqueeze(-3) @ eta.unsqueeze(-1)).squeeze(-1)).sum(-1)
        return _checked("GaussianMixture log_normalizer", log_z + quadratic)

    def mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$\nabla G(\eta) = \sum_n r_n(\eta)(\mu_n + \Sigma_n\eta)$.

        With a shared covariance this is $\Sigma\eta$ plus softmax attention over the means with
        biases $\log\pi_n$ (claim A6), computed by the fused attention kernel.
        """
        self.check_eta(eta)
        if self.shared:
            attention = self._attention.mean(eta)
            sigma_eta = (self.covariance.unsqueeze(-3) @ eta.unsqueeze(-1)).squeeze(-1)  # (*B, Q, D)
            return _checked("GaussianMixture mean", attention + sigma_eta)
        r = self.responsibilities(eta)
        return _checked("GaussianMixture mean", (r.unsqueeze(-1) * self.component_means(eta)).sum(-2))

    def fisher(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim dim"]:
        r"""$\nabla^2 G = \sum_n r_n\Sigma_n + \sum_n r_n (m_n - \bar m)(m_n - \bar m)^\top$ (total covariance, A8)."""
        r = self.responsibilities(eta)  # (*B, Q, C)
        # a shared Sigma eta is common to every component's mean: it leaves the centred means (and cannot overflow)
        means = self.means.unsqueeze(-3) if self.shared else self.component_means(eta)  # (*B, Q or 1, C, D)
        centred = means - (r.unsqueeze(-1) * means).sum(-2, keepdim=True)
        between = (r.unsqueeze(-1) * centred).mT @ centred  # (*B, Q, D, D)
        within = (r[..., None, None] * self.component_covariance.unsqueeze(-4)).sum(-3)
        return _checked("GaussianMixture fisher", within + between)

    def log_prob(
        self, x: Float[Tensor, "*sample query dim"], eta: Float[Tensor, "*batch query dim"]
    ) -> Float[Tensor, "*sample query"]:
        r"""$\log p(x|\eta) = \log\sum_n r_n(\eta)\,\mathcal{N}(x; \mu_n + \Sigma_n\eta, \Sigma_n)$."""
        as_tensor("x", x)
        check_finite("x", x)
        log_r = torch.log_softmax(self._logits(eta), dim=-1)  # (*B, Q, C)
        dens = gaussian_log_density(x.unsqueeze(-2), self.component_means(eta), self.component_chol.unsqueeze(-4))
        return torch.logsumexp(log_r + dens, dim=-1)

    def sample(
        self,
        eta: Float[Tensor, "*batch query dim"],
        num_samples: int,
        generator: torch.Generator | None = None,
    ) -> Float[Tensor, "sample *batch query dim"]:
        """Draw a component from $r(\\eta)$, then a point from that tilted Gaussian component."""
        positive_int("num_samples", num_samples)
        r = self.responsibilities(eta)  # (*B, Q, C)
        comp = draws.multinomial(r.reshape(-1, r.shape[-1]), num_samples, generator)
        comp = comp.T.reshape(num_samples, *r.shape[:-1])  # (S, *B, Q)
        means = self.component_means(eta)  # (*B, Q, C, D)
        z = draws.randn((num_samples, *means.shape[:-2], self.dim), means, generator)
        points = means + (self.component_chol.unsqueeze(-4).to(z.dtype) @ z[..., None, :, None]).squeeze(-1)
        index = comp[..., None, None].expand(*comp.shape, 1, self.dim)
        return torch.gather(points, -2, index).squeeze(-2)

    def entropy_estimate(
        self,
        eta: Float[Tensor, "*batch query dim"],
        num_samples: int = 4096,
        generator: torch.Generator | None = None,
    ) -> tuple[Float[Tensor, "*batch query"], Float[Tensor, "*batch query"]]:
        r"""Monte Carlo $H \approx -\frac1S\sum_s \log p(x_s|\eta)$, $x_s \sim p(\cdot|\eta)$; returns
        ``(estimate, standard_error)``. A Gaussian mixture's entropy has no closed form."""
        log_p = self.log_prob(self.sample(eta, num_samples, generator), eta)  # (S, *B, Q)
        return -log_p.mean(0), log_p.std(0) / num_samples**0.5

    def entropy(
        self,
        eta: Float[Tensor, "*batch query dim"],
        num_samples: int = 4096,
        generator: torch.Generator | None = None,
    ) -> Float[Tensor, "*batch query"]:
        """Monte Carlo entropy (see ``entropy_estimate``); ``generator=None`` uses a fixed seed 0."""
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        return self.entropy_estimate(eta, num_samples, generator)[0]

    def expected_log_base(
        self,
        eta: Float[Tensor, "*batch query dim"],
        num_samples: int = 4096,
        generator: torch.Generator | None = None,
    ) -> Float[Tensor, "*batch query"]:
        r"""Monte Carlo $E_{p(x|\eta)}[\log h(x)]$ using $\log h(x) = \log p(x|0) + G(0)$; fixed seed 0 by default."""
        generator = generator if generator is not None else torch.Generator().manual_seed(0)
        x = self.sample(eta, num_samples, generator)  # (S, *B, Q, D)
        zero = torch.zeros_like(eta)
        return (self.log_prob(x, zero) + self.log_normalizer(zero)).mean(0)

    def lower_bound(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""Jensen bound $G_{LB}(\eta) = \log\Pi + \sum_n \bar\pi_n G_n(\eta) \le G(\eta)$, $\bar\pi = \pi / \Pi$.

        With weights summing to one ($\Pi = 1$) this is seed 000 Prop. 3 (claim A7).
        """
        log_total = torch.logsumexp(self.log_weights, dim=-1).unsqueeze(-1)  # (*B, 1)
        pi = torch.softmax(self.log_weights, dim=-1).unsqueeze(-2)  # (*B, 1, C)
        return log_total + (pi * self.component_log_normalizers(eta)).sum(-1)

    def lower_bound_mean(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query dim"]:
        r"""$\nabla G_{LB}(\eta) = \sum_n \bar\pi_n(\mu_n + \Sigma_n\eta)$ (claim A7)."""
        self.check_eta(eta)
        pi = torch.softmax(self.log_weights, dim=-1).unsqueeze(-2)  # (*B, 1, C)
        return (pi.unsqueeze(-1) * self.component_means(eta)).sum(-2)

    def jensen_gap(self, eta: Float[Tensor, "*batch query dim"]) -> Float[Tensor, "*batch query"]:
        r"""$G(\eta) - G_{LB}(\eta) \ge 0$ (claim A7)."""
        return self.log_normalizer(eta) - self.lower_bound(eta)
