r"""Operators on a cloud of natural parameters ``(batch, token, dim)`` (claims B1-B7; seed 000 §3.3, §4).

- ``AttentionUpdate``: $\eta_t \mapsto [\eta_t +]\; s\,\nabla G_h(\beta W\eta_t)$, one gradient step of
  the carrier's log-normalizer at every token (with the residual) or the bare attention output;
- ``FeedForward``: a pointwise MLP (random or given), optionally residual;
- any normalization of ``expattn.nn.norms``;
- ``Compose``: operators applied first to last.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from expattn.arguments import finite_number, positive_int
from expattn.core.empirical import Empirical
from expattn.core.measure import Measure
from expattn.core.mixture import GaussianMixture
from expattn.core.validate import as_tensor, check_finite, check_ndim, check_positive_definite

# Carriers by the names of expattn.nn.carriers (and of the core measures that compute them).
CARRIERS = ("empirical", "gaussian_mixture")


@dataclass(frozen=True)
class AttentionConfig:
    r"""Options of ``AttentionUpdate``.

    Attributes:
        beta: inverse temperature $\beta > 0$ multiplying the natural parameter.
        step: step size $s > 0$ of the residual (gradient-ascent) form.
        residual: ``True``: $\eta + s\nabla G$; ``False``: $\nabla G$ alone (a convex combination
            of the atoms for the empirical carrier, claim B2).
        carrier: ``"empirical"`` (Dirac atoms: softmax attention) or ``"gaussian_mixture"`` (a
            Gaussian around every atom with one covariance $\Sigma$, claim A6: a kernel-smoothed cloud),
            named as the carriers of ``expattn.nn.carriers``.
        bandwidth: for ``"gaussian_mixture"`` without an explicit covariance, $\Sigma = \text{bandwidth}^2 I$.
    """

    beta: float = 1.0
    step: float = 1.0
    residual: bool = True
    carrier: str = "empirical"
    bandwidth: float = 0.0

    def __post_init__(self) -> None:
        finite_number("beta", self.beta, above=0)
        finite_number("step", self.step, above=0)
        if self.carrier not in CARRIERS:
            raise ValueError(f"carrier must be one of {CARRIERS}, got {self.carrier!r}")
        finite_number("bandwidth", self.bandwidth, at_least=0)


def check_cloud(x: Tensor, dim: int | None = None, name: str = "cloud") -> Tensor:
    """A finite floating ``(batch, token, dim)`` tensor, with last dimension ``dim`` if given."""
    as_tensor(name, x)
    if x.ndim != 3:
        raise ValueError(f"{name} must have shape (batch, token, dim), got {tuple(x.shape)}")
    if dim is not None and x.shape[-1] != dim:
        raise ValueError(f"{name} has last dimension {x.shape[-1]}, expected {dim}")
    return check_finite(name, x)


class AttentionUpdate(nn.Module):
    r"""One attention step read as a gradient step on the log-normalizer (claim B1).

    $$\eta_t' = \eta_t + s\, \nabla G(\beta W \eta_t) \quad\text{or}\quad \eta_t' = \nabla G(\beta W\eta_t)$$

    with $\nabla G(\theta) = \sum_n \operatorname{softmax}_n(x_n^\top\theta)\, x_n$ for the empirical
    carrier and $\nabla G(\theta) = \Sigma\theta + \sum_n \operatorname{softmax}_n(x_n^\top\theta)\, x_n$
    for the Gaussian mixture $h = \frac1N\sum_n N(x_n, \Sigma)$ (A6). One atom with the mixture
    carrier is the Gaussian carrier $N(\mu, \Sigma)$, $\nabla G = \mu + \Sigma\theta$ (A5, Thm. 1).

    Args:
        config: ``AttentionConfig``.
        atoms: ``(key, dim)`` or ``(batch, key, dim)`` fixed carrier (cross-attention, Hopfield
            setting); ``None`` makes the cloud its own carrier (self-attention).
        covariance: ``(dim, dim)`` $\Sigma$ of the ``gaussian_mixture`` carrier (overrides ``bandwidth``).
        query_map: ``(dim, dim)`` $W$, a linear distortion of the natural parameter
            ($W_k^\top W_q$ of a head with values = keys); ``None`` is the identity.
        carrier_map: ``(dim, dim)`` $M$: the atoms are $x_n = M a_n$ for the given or self atoms
            $a_n$ (Theorem 1's carrier "given pointwise by $x = \Sigma\eta$"); ``None`` is $M = I$.
        measure: any fixed carrier ``expattn.core.measure.Measure`` (e.g. one built from the measure
            registry); then $\nabla G$ is ``measure.mean`` and atoms, covariance, carrier_map must be ``None``.
    """

    def __init__(
        self,
        config: AttentionConfig,
        atoms: Float[Tensor, "*batch key dim"] | None = None,
        covariance: Float[Tensor, "dim dim"] | None = None,
        query_map: Float[Tensor, "dim dim"] | None = None,
        carrier_map: Float[Tensor, "dim dim"] | None = None,
        measure: Measure | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        if measure is not None:
            if not isinstance(measure, Measure):
                raise TypeError(f"measure must be an expattn Measure, got {type(measure).__name__}")
            if atoms is not None or covariance is not None or carrier_map is not None:
                raise ValueError("measure replaces atoms, covariance and carrier_map; pass only one of them")
        self.measure = measure
        if atoms is not None:
            as_tensor("atoms", atoms)
            check_ndim("atoms", atoms, 2, "(key, dim) or (batch, key, dim)")
            check_finite("atoms", atoms)
        if covariance is not None:
            if config.carrier != "gaussian_mixture":
                raise ValueError(f"covariance needs carrier='gaussian_mixture', got carrier={config.carrier!r}")
            as_tensor("covariance", covariance)
            check_positive_definite("covariance", covariance)
        for name, m in (("query_map", query_map), ("carrier_map", carrier_map)):
            if m is not None:
                as_tensor(name, m)
                if m.ndim != 2 or m.shape[0] != m.shape[1]:
                    raise ValueError(f"{name} must be a square (dim, dim) matrix, got {tuple(m.shape)}")
                check_finite(name, m)
        self.atoms, self.covariance = atoms, covariance
        self.query_map, self.carrier_map = query_map, carrier_map

    def gradient(self, eta: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch token dim"]:
        r"""$\nabla G(\beta W\eta)$ at every token: the attention output (values = keys)."""
        check_cloud(eta, name="eta")
        theta = self.config.beta * eta
        if self.query_map is not None:
            if self.query_map.shape[-1] != eta.shape[-1]:
                raise ValueError(f"query_map has last dimension {self.query_map.shape[-1]}, expected {eta.shape[-1]}")
            theta = theta @ self.query_map.to(eta.dtype).mT
        if self.measure is not None:
            if self.measure.dim != eta.shape[-1]:
                raise ValueError(f"measure has dim {self.measure.dim}, expected {eta.shape[-1]} (the cloud's dim)")
            return self.measure.mean(theta)
        return self.carrier(eta).mean(theta)

    def carrier(self, eta: Float[Tensor, "batch token dim"]) -> Measure:
        """The carrier for the cloud ``eta``: Dirac atoms (Empirical) or Gaussians around them (GaussianMixture)."""
        atoms = eta if self.atoms is None else self.atoms
        named = {"atoms": atoms, "covariance": self.covariance, "carrier_map": self.carrier_map}
        for name, m in named.items():
            if m is not None and m.shape[-1] != eta.shape[-1]:
                raise ValueError(f"{name} has last dimension {m.shape[-1]}, expected {eta.shape[-1]} (the cloud's dim)")
        atoms = atoms.to(eta.device, eta.dtype)
        if self.carrier_map is not None:
            atoms = atoms @ self.carrier_map.to(eta.device, eta.dtype).mT
        if self.config.carrier == "empirical" or (self.covariance is None and self.config.bandwidth == 0):
            return Empirical(atoms)
        d = eta.shape[-1]
        cov = (self.config.bandwidth**2 * torch.eye(d, dtype=eta.dtype, device=eta.device) if self.covariance is None
               else self.covariance.to(eta.device, eta.dtype))
        return GaussianMixture(atoms, cov.expand(*atoms.shape[:-2], d, d))

    def forward(self, eta: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch token dim"]:
        grad = self.gradient(eta)
        return eta + self.config.step * grad if self.config.residual else grad


@dataclass(frozen=True)
class FeedForwardConfig:
    """Options of a random two-layer MLP $x \\mapsto [x +]\\, W_2\\,\\mathrm{gelu}(W_1 x + b_1) + b_2$.

    Attributes:
        dim: feature size; hidden: hidden width; gain: weights are $N(0, \\text{gain}^2/\\text{fan-in})$;
        residual: add the input; seed: seed of the weights.
    """

    dim: int
    hidden: int
    gain: float = 1.0
    residual: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        positive_int("dim", self.dim)
        positive_int("hidden", self.hidden)
        finite_number("gain", self.gain, above=0)


class FeedForward(nn.Module):
    r"""Pointwise MLP operator (claim B7): $x_t \mapsto [x_t +]\, f(x_t)$ with a random or given $f$."""

    def __init__(self, config: FeedForwardConfig, mlp: nn.Module | None = None) -> None:
        super().__init__()
        self.config = config
        self.mlp = mlp
        if mlp is None:
            gen = torch.Generator().manual_seed(config.seed)
            d, h, g = config.dim, config.hidden, config.gain
            self.register_buffer("w1", torch.randn(h, d, generator=gen, dtype=torch.float64) * g / d**0.5)
            self.register_buffer("b1", torch.randn(h, generator=gen, dtype=torch.float64) * 0.1)
            self.register_buffer("w2", torch.randn(d, h, generator=gen, dtype=torch.float64) * g / h**0.5)
            self.register_buffer("b2", torch.randn(d, generator=gen, dtype=torch.float64) * 0.1)

    def forward(self, x: Float[Tensor, "batch token dim"]) -> Float[Tensor, "batch token dim"]:
        check_cloud(x, self.config.dim, name="x")
        if self.mlp is not None:
            update = self.mlp(x)
        else:
            hidden = F.gelu(F.linear(x, self.w1.to(x.dtype), self.b1.to(x.dtype)))
            update = F.linear(hidden, self.w2.to(x.dtype), self.b2.to(x.dtype))
        return x + update if self.config.residual else update


class Compose(nn.Sequential):
    r"""Operators applied first to last: ``Compose(A, N)`` is $N \circ A$ (e.g. Theorem 1's RN∘A)."""

    def __init__(self, *operators: nn.Module) -> None:
        if not operators:
            raise ValueError("Compose needs at least one operator")
        for i, op in enumerate(operators):
            if not isinstance(op, nn.Module):
                raise TypeError(f"operators[{i}] must be a torch.nn.Module, got {type(op).__name__}")
        super().__init__(*operators)
