r"""Normalizations as contractions of a cloud of hidden states (claims B4, C2; seed 000 §3.3).

Every normalization takes a cloud ``(*batch, token, dim)`` and returns one of the same shape:

- ``layernorm``: $y_t = (x_t - \bar x_t \mathbf 1)/\sqrt{\operatorname{var}(x_t) + \epsilon}$ per token;
- ``rmsnorm``: $y_t = x_t / \sqrt{\operatorname{mean}(x_t^2) + \epsilon}$ per token;
- ``sphere``: $y_t = r\, x_t / \lVert x_t \rVert$ (cosine similarity, claim C2);
- ``whitening``: Theorem 1's $\mathrm{RN}_{\eta_0,\Lambda_0}$, one affine map per cloud,
  $y_t = \eta_0 + \Lambda_0^{1/2} \bar S^{-1/2} (x_t - \bar x)$ with $\bar x, \bar S$ the cloud's
  mean and covariance over tokens;
- ``identity``.

All share one constructor signature ``cls(config: NormConfig)`` and a registry
(``build_norm(name, config)``, ``register_norm``) whose entries declare their properties
(``norm_spec(name).per_token``, ``.affine``), which callers read instead of the name.
``contraction(x)`` measures how much one application shrinks the cloud's spread.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from expattn.arguments import finite_number, positive_int
from expattn.core.validate import (
    as_tensor,
    check_finite,
    check_ndim,
    check_output,
    check_positive_definite,
    exact_scale,
    require_finite,
)
from expattn.validation import validate_enabled


@dataclass(frozen=True)
class NormConfig:
    r"""Options shared by the normalizations (each uses the ones that concern it).

    Attributes:
        dim: feature size $D$ of the cloud.
        eps: added to the variance (layernorm, rmsnorm) or floor of the norm (sphere).
        radius: radius $r$ of the sphere projection.
        elementwise_affine: learnable per-feature scale (and shift for layernorm), as in torch.
        bias: layernorm with ``elementwise_affine`` only: the learnable shift (torch's ``bias``);
            ``False`` keeps the scale alone, as nanoGPT's bias-free recipe does.
        target_mean: ``(dim,)`` $\eta_0$ of whitening (``None``: zero).
        target_cov: ``(dim, dim)`` $\Lambda_0$ of whitening, positive definite (``None``: identity).
        ridge: whitening only: $\bar S + \lambda I$ with $\lambda$ = ``ridge`` $\cdot \operatorname{tr}\bar S / D$
            replaces $\bar S$ (0: Theorem 1's exact map, undefined for a singular cloud; > 0: defined for
            any cloud that is not a single point, as decorrelated batch normalization uses it in training).
    """

    dim: int
    eps: float = 1e-5
    radius: float = 1.0
    elementwise_affine: bool = False
    bias: bool = True
    target_mean: Tensor | None = None
    target_cov: Tensor | None = None
    ridge: float = 0.0

    def __post_init__(self) -> None:
        positive_int("dim", self.dim)
        finite_number("eps", self.eps, at_least=0)
        finite_number("radius", self.radius, above=0)
        finite_number("ridge", self.ridge, at_least=0)


def spread(x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch"]:
    r"""Root-mean-square distance to the centroid, $\sqrt{\operatorname{tr}\operatorname{Cov}(x)}$.

    Computed as $s \cdot \operatorname{spread}(x / s)$ with $s$ the power of two below $\max|x|$ per cloud
    (``exact_scale``), so that squares do not overflow: a cloud of size 1e20 has a finite float32 spread although
    its squares (1e40) are not. A cloud without tokens has no centroid: ``ValueError``.
    """
    if x.shape[-2] == 0:
        raise ValueError("x has no tokens; the spread of an empty cloud is undefined")
    scale = exact_scale(x, (-2, -1))  # (*B, 1, 1)
    y = x / scale
    centred = y - y.mean(-2, keepdim=True)
    return centred.square().sum(-1).mean(-1).sqrt() * scale[..., 0, 0]


class Norm(nn.Module, ABC):
    """Base class: a map of clouds ``(*batch, token, dim) -> (*batch, token, dim)``.

    Subclasses implement ``normalize`` (the map itself); ``forward`` checks the cloud first (shape
    and finiteness, ``check_cloud``) and then applies it. A caller that already guarantees a valid
    cloud, such as a training loop that checks its loss every step, may call ``normalize`` directly.
    """

    def forward(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        y = self.normalize(self.check_cloud(x))
        if validate_enabled(self.validate_args):
            check_output(f"{type(self).__name__} output", y, "the cloud's moments overflow the floating range")
        return y

    @abstractmethod
    def normalize(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        """The map itself, on a cloud already checked by ``forward``."""

    def __init__(self, config: NormConfig) -> None:
        super().__init__()
        self.config = config
        self.validate_args: bool | None = None  # None: follow expattn.validation's global switch

    def check_cloud(self, x: Tensor) -> Tensor:
        as_tensor("x", x)
        check_ndim("x", x, 2, "(*batch, token, dim)")
        if x.shape[-1] != self.config.dim:
            raise ValueError(f"x has last dimension {x.shape[-1]}, expected dim={self.config.dim}")
        return require_finite("x", x) if validate_enabled(self.validate_args) else x

    def contraction(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch"]:
        r"""Measured contraction factor $\operatorname{spread}(N(x)) / \operatorname{spread}(x)$.

        Below one: the normalization shrinks the cloud around its centroid (claim B4).
        """
        if x.ndim >= 2 and x.shape[-2] == 0:
            raise ValueError("x has no tokens; the contraction factor of an empty cloud is undefined")
        with torch.no_grad():
            before = spread(self.check_cloud(x))
            if (before == 0).any():
                raise ValueError("x holds a cloud with zero spread; its contraction factor is undefined")
            return spread(self(x)) / before


class Identity(Norm):
    r"""$y = x$ (the baseline of B4)."""

    def normalize(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        return x


class _PerToken(Norm):
    """Shared affine parameters of layernorm and rmsnorm."""

    def __init__(self, config: NormConfig, shift: bool) -> None:
        super().__init__(config)
        self.weight = nn.Parameter(torch.ones(config.dim)) if config.elementwise_affine else None
        shifted = config.elementwise_affine and shift and config.bias
        self.bias = nn.Parameter(torch.zeros(config.dim)) if shifted else None


class LayerNorm(_PerToken):
    r"""$y_t = (x_t - \operatorname{mean}(x_t)) / \sqrt{\operatorname{var}(x_t) + \epsilon}\, \odot w + b$.

    The variance is the biased one over the feature axis; computed by torch's fused kernel.
    """

    def __init__(self, config: NormConfig) -> None:
        super().__init__(config, shift=True)

    def normalize(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        return F.layer_norm(x, (self.config.dim,), self.weight, self.bias, self.config.eps)


class RMSNorm(_PerToken):
    r"""$y_t = x_t / \sqrt{\operatorname{mean}(x_t^2) + \epsilon}\, \odot w$ (as ``torch.nn.RMSNorm``)."""

    def __init__(self, config: NormConfig) -> None:
        super().__init__(config, shift=False)

    def normalize(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        return F.rms_norm(x, (self.config.dim,), self.weight, self.config.eps)


class Sphere(Norm):
    r"""$y_t = r\, x_t / \max(\lVert x_t \rVert, \epsilon)$: projection to the sphere of radius $r$ (C2)."""

    def normalize(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        norm = x.norm(dim=-1, keepdim=True).clamp_min(self.config.eps)
        return self.config.radius * x / norm


def sym_power(matrix: Float[Tensor, "*batch dim dim"], power: float) -> Float[Tensor, "*batch dim dim"]:
    r"""$M^{p} = V \operatorname{diag}(\lambda^p) V^\top$ for symmetric positive definite $M$."""
    evals, evecs = torch.linalg.eigh(matrix)
    return (evecs * evals.unsqueeze(-2).pow(power)) @ evecs.mT


class Whitening(Norm):
    r"""Theorem 1's renormalization $\mathrm{RN}_{\eta_0,\Lambda_0}$ (claim B5, B4).

    $$y_t = \eta_0 + \Lambda_0^{1/2}\, \bar S^{-1/2} (x_t - \bar x), \quad
    \bar x = \tfrac1T \sum_t x_t, \quad \bar S = \tfrac1T \sum_t (x_t - \bar x)(x_t - \bar x)^\top$$

    with symmetric square roots. The output cloud has mean $\eta_0$ and covariance (normalised
    by $T$) $\Lambda_0$ exactly. Needs more tokens than features and a non-degenerate cloud;
    ``NormConfig.ridge`` > 0 whitens with $\bar S + \lambda I$ instead (covariance then slightly below $\Lambda_0$).
    Seed 000 prints $\bar S = E[\eta\eta^\top]$, the raw second moment; that only agrees when
    $\bar x = 0$, so the centred covariance is used here.
    """

    def __init__(self, config: NormConfig) -> None:
        super().__init__(config)
        d = config.dim
        mean = torch.zeros(d) if config.target_mean is None else as_tensor("target_mean", config.target_mean)
        cov = torch.eye(d) if config.target_cov is None else as_tensor("target_cov", config.target_cov)
        if mean.shape != (d,):
            raise ValueError(f"target_mean must have shape ({d},), got {tuple(mean.shape)}")
        if cov.shape != (d, d):
            raise ValueError(f"target_cov must have shape ({d}, {d}), got {tuple(cov.shape)}")
        check_finite("target_mean", mean)
        check_positive_definite("target_cov", cov)
        self.register_buffer("target_mean", mean.clone())
        self.register_buffer("target_cov_sqrt", sym_power(cov, 0.5))

    def normalize(self, x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch token dim"]:
        """The map; half precision (and autocast) is computed in float32 (``eigh`` has no half kernel).

        Under ``torch.compile`` the data-dependent cloud checks are left out (a non-finite result
        then shows in the caller's loss) so that the map traces as one graph.
        """
        tokens, d = x.shape[-2], x.shape[-1]
        if tokens == 0 or (tokens <= d and self.config.ridge == 0):
            raise ValueError(f"whitening needs more tokens than features (or ridge > 0), got token={tokens}, dim={d}")
        half = x.dtype in (torch.float16, torch.bfloat16)
        with torch.autocast(x.device.type, enabled=False):
            work = x.float() if half else x
            centred = work - work.mean(-2, keepdim=True)
            cov = centred.mT @ centred / tokens  # (*B, D, D)
            checked = not torch.compiler.is_compiling()
            if self.config.ridge > 0:  # then the condition number is at most 1 + D / ridge by construction
                level = torch.diagonal(cov, dim1=-2, dim2=-1).mean(-1)  # (*B,) tr(S) / D
                if checked and not bool(((level > 0) & torch.isfinite(level)).all()):
                    raise ValueError("x holds a cloud of identical tokens or one whose covariance overflows; "
                                     "whitening is undefined")
                eye = torch.eye(d, dtype=cov.dtype, device=cov.device)
                cov = cov + (self.config.ridge * level)[..., None, None] * eye
            elif checked:
                if not bool(torch.isfinite(cov).all()):
                    raise ValueError("x holds a cloud whose covariance overflows; whitening is undefined")
                evals = torch.linalg.eigvalsh(cov)
                if (evals[..., 0] <= 1e3 * torch.finfo(cov.dtype).eps * evals[..., -1]).any():
                    raise ValueError("x holds a cloud with singular covariance; whitening is undefined (set ridge > 0)")
            gain = self.target_cov_sqrt.to(cov.dtype) @ sym_power(cov, -0.5)  # (*B, D, D)
            out = self.target_mean.to(cov.dtype) + centred @ gain.mT
        return out.to(x.dtype)


NormFactory = Callable[[NormConfig], Norm]


@dataclass(frozen=True)
class NormSpec:
    """A registered normalization: its factory and the properties callers read instead of its name.

    Attributes:
        factory: ``config -> Norm``.
        per_token: $y_t$ depends on $x_t$ alone, so the map gives the same result however the
            tokens are grouped into clouds (layernorm, rmsnorm, sphere, identity); ``False`` for a
            map of the whole cloud (whitening).
        affine: the map honours ``NormConfig.elementwise_affine`` (a learnable per-feature gain,
            and shift where it has one).
    """

    factory: NormFactory
    per_token: bool
    affine: bool


_NORMS: dict[str, NormSpec] = {}


def register_norm(name: str, factory: NormFactory, *, per_token: bool, affine: bool) -> None:
    """Add a normalization ``factory(config) -> Norm`` under ``name`` with its properties (``NormSpec``)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if not callable(factory):
        raise TypeError(f"factory must be callable (config -> Norm), got {type(factory).__name__}")
    for prop, value in (("per_token", per_token), ("affine", affine)):
        if not isinstance(value, bool):
            raise TypeError(f"{prop} must be a bool, got {value!r}")
    if name in _NORMS:
        raise ValueError(f"a normalization named {name!r} is already registered")
    _NORMS[name] = NormSpec(factory, per_token, affine)


def norm_names() -> list[str]:
    """Names of the registered normalizations."""
    return sorted(_NORMS)


def norm_spec(name: str) -> NormSpec:
    """The registry entry of ``name`` (factory and properties); unknown names raise ``ValueError``."""
    if name not in _NORMS:
        raise ValueError(f"unknown normalization {name!r}; known: {', '.join(norm_names())}")
    return _NORMS[name]


def build_norm(name: str, config: NormConfig) -> Norm:
    """The normalization called ``name``, built from ``config``; unknown names raise ``ValueError``."""
    return norm_spec(name).factory(config)


for _name, _cls, _per_token, _affine in (
    ("identity", Identity, True, False),
    ("layernorm", LayerNorm, True, True),
    ("rmsnorm", RMSNorm, True, True),
    ("sphere", Sphere, True, False),
    ("whitening", Whitening, False, False),
):
    register_norm(_name, _cls, per_token=_per_token, affine=_affine)
