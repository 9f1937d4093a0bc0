r"""The modern continuous Hopfield density as a Gaussian mixture of one-hidden-unit EBMs (seed 004, D6).

With stored patterns $W_\mu \in \mathbb{R}^D$ (rows of ``patterns``) and inverse temperature $\beta$,

$$p(v) \propto \sum_\mu e^{\beta(-\frac12 |v|^2 + W_\mu^\top v)}
       = \sum_\mu w_\mu\, N(v;\, W_\mu,\, \beta^{-1} I), \qquad
  w_\mu = \frac{Z_\mu}{\sum_\nu Z_\nu},\quad Z_\mu = e^{\beta |W_\mu|^2 / 2},$$

since completing the square gives $-\frac\beta2|v - W_\mu|^2 + \frac\beta2|W_\mu|^2$. The normaliser is
$Z = (2\pi/\beta)^{D/2} \sum_\mu Z_\mu$. At $\beta = 1$, $-\log$ of the unnormalised density is the
Hopfield energy $\frac12|v|^2 - \operatorname{logsumexp}_\mu(W_\mu^\top v)$ of seed 004; each component is the
effective energy $\frac12|v|^2 - W_\mu^\top v$ of one hidden unit with a constant prior ($\kappa_1 = 1$).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor

from expattn.arguments import finite_number, positive_int
from expattn.core import draws
from expattn.core.hopfield import hopfield_energy
from expattn.core.validate import as_tensor, check_finite, check_ndim


class HopfieldMixture:
    r"""$p(v) \propto \sum_\mu \exp(\beta(-\frac12|v|^2 + W_\mu^\top v))$ and its mixture form (claim D6).

    Args:
        patterns: ``(pattern, dim)`` stored patterns $W_\mu$ (float, finite, at least one).
        beta: inverse temperature $\beta > 0$.
    """

    def __init__(self, patterns: Float[Tensor, "pattern dim"], beta: float = 1.0) -> None:
        as_tensor("patterns", patterns)
        check_ndim("patterns", patterns, 2, "(pattern, dim)")
        if patterns.ndim != 2 or patterns.shape[0] == 0:
            raise ValueError(f"patterns must have shape (pattern >= 1, dim), got {tuple(patterns.shape)}")
        check_finite("patterns", patterns)
        finite_number("beta", beta, above=0)
        self.patterns = patterns
        self.beta = float(beta)
        self.dim = patterns.shape[1]

    def _check_v(self, v: Tensor) -> Tensor:
        as_tensor("v", v)
        check_finite("v", v)
        if v.ndim < 1 or v.shape[-1] != self.dim:
            raise ValueError(f"v must have shape (*batch, {self.dim}), got {tuple(v.shape)}")
        return v

    def energy(self, v: Float[Tensor, "*batch dim"]) -> Float[Tensor, " *batch"]:
        r"""$E(v) = \frac12 |v|^2 - \beta^{-1} \operatorname{logsumexp}_\mu(\beta W_\mu^\top v)$.

        The density is $p(v) \propto e^{-\beta E(v)}$; shape ``(*batch,)``.
        """
        self._check_v(v)
        return hopfield_energy(v.unsqueeze(-2), self.patterns, self.beta).squeeze(-1)  # one query per state

    def log_component_normalizers(self) -> Float[Tensor, " pattern"]:
        r"""$\log Z_\mu = \beta |W_\mu|^2 / 2$."""
        return 0.5 * self.beta * (self.patterns**2).sum(-1)

    def log_weights(self) -> Float[Tensor, " pattern"]:
        r"""$\log w_\mu = \log Z_\mu - \log \sum_\nu Z_\nu$: mixture weights set by the pattern norms."""
        return torch.log_softmax(self.log_component_normalizers(), -1)

    def log_normalizer(self) -> Float[Tensor, ""]:
        r"""$\log Z = \frac D2 \log(2\pi/\beta) + \operatorname{logsumexp}_\mu \log Z_\mu$, exact."""
        gaussian = 0.5 * self.dim * math.log(2 * math.pi / self.beta)
        return gaussian + torch.logsumexp(self.log_component_normalizers(), -1)

    def log_density(self, v: Float[Tensor, "*batch dim"]) -> Float[Tensor, " *batch"]:
        r"""$\log p(v) = -\beta E(v) - \log Z$, from the energy."""
        return -self.beta * self.energy(v) - self.log_normalizer()

    def mixture_log_density(self, v: Float[Tensor, "*batch dim"]) -> Float[Tensor, " *batch"]:
        r"""$\log \sum_\mu w_\mu N(v; W_\mu, \beta^{-1} I)$, from the mixture (equals ``log_density``)."""
        self._check_v(v)
        sq = ((v.unsqueeze(-2) - self.patterns) ** 2).sum(-1)  # (*B, N)
        log_gauss = -0.5 * self.beta * sq + 0.5 * self.dim * math.log(self.beta / (2 * math.pi))
        return torch.logsumexp(self.log_weights() + log_gauss, -1)

    def mean(self) -> Float[Tensor, " dim"]:
        r"""$E_p[v] = \sum_\mu w_\mu W_\mu$."""
        return self.log_weights().exp() @ self.patterns

    def covariance(self) -> Float[Tensor, "dim dim"]:
        r"""$\operatorname{Cov}_p[v] = \beta^{-1} I + \sum_\mu w_\mu (W_\mu - \bar W)(W_\mu - \bar W)^\top$."""
        w = self.log_weights().exp()
        centred = self.patterns - self.mean()
        eye = torch.eye(self.dim, dtype=self.patterns.dtype, device=self.patterns.device)
        return eye / self.beta + (w.unsqueeze(-1) * centred).T @ centred

    def sample(
        self, num_samples: int, generator: torch.Generator | None = None
    ) -> tuple[Int[Tensor, " sample"], Float[Tensor, "sample dim"]]:
        r"""Draw $\mu \sim w$, then $v = W_\mu + \beta^{-1/2}\varepsilon$; returns ``(components, points)``."""
        positive_int("num_samples", num_samples)
        mu = draws.multinomial(self.log_weights().exp(), num_samples, generator)
        noise = draws.randn((num_samples, self.dim), self.patterns, generator)
        return mu, self.patterns[mu] + noise / math.sqrt(self.beta)
