r"""Attention carriers: which intrinsic measure $h$ each head's exponential family is built on.

Every carrier maps per-head queries, keys and values to the gradient of its log-normalizer,

$$\mathrm{out}_i = \nabla_\eta G(\eta_i), \qquad \eta_i = \beta\, q_i,$$

with the attention reading of seed 000: the atoms of $h$ are the keys, and values replace the
keys in the expectation (with $V = K$ the output is exactly $\nabla G$). Registered carriers:

- ``empirical``: $h = \sum_n \delta_{k_n}$, softmax attention (claims A1, A3);
- ``gaussian_mixture``: $h = \sum_n \pi_n \mathcal N(k_n, \Sigma)$, softmax attention plus
  $\Sigma\eta$ (claim A6, seed 000 Prop. 2);
- ``mixture_lower_bound``: Jensen's lower bound of the same mixture, whose gradient is
  $\sum_n \pi_n k_n + \Sigma\eta$ (claim A7, seed 000 Prop. 3).

One signature for all: ``carrier(q, k, v, mask, scale, need_stats) -> CarrierOutput`` with
``q: (batch, head, query, dim)``, ``k: (batch, kv_head, key, dim)``, ``v: (batch, kv_head, key,
dim_v)``, ``mask`` a boolean keep-mask or an additive float bias broadcasting to
``(batch, head, query, key)``. ``head`` must be a multiple of ``kv_head`` (grouped heads).
Carriers with ``fused_causal = True`` also take ``causal=True`` with ``mask=None`` for plain
causal self-attention (query $i$ sees keys $j \le i$), so the fused kernel can skip the masked
half instead of reading a ``(query, key)`` mask.

A query row whose keys are all masked has an empty carrier: its output is zero, its weights are
zero and its log-normalizer is $-\infty$ (no NaN, zero gradient). With no keys at all every row is
such a row (weights ``(batch, head, query, 0)``).

With values = keys each carrier's output, weights and $G$ are those of the core measure on the keys
(``core.empirical.Empirical``, ``core.mixture.GaussianMixture`` and its Jensen bound), to float64
round-off: ``tests/unit/test_carriers_core.py`` compares them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float
from torch import Tensor, nn

from expattn.arguments import positive_int
from expattn.core.softmax import softmax_with_log_normalizer

Mask = Bool[Tensor, "*#batch query key"] | Float[Tensor, "*#batch query key"]


class CarrierOutput(NamedTuple):
    """What a carrier returns.

    Attributes:
        output: ``(batch, head, query, dim_v)`` the attention output $\\nabla G$.
        weights: ``(batch, head, query, key)`` the distribution over atoms, or ``None``.
        log_normalizer: ``(batch, head, query)`` $G(\\eta)$ per head and query, or ``None``.
    """

    output: Tensor
    weights: Tensor | None
    log_normalizer: Tensor | None


def _dead_rows(mask: Tensor) -> Tensor:
    """``(..., query)`` True where a row keeps no key."""
    if mask.dtype == torch.bool:
        return ~mask.any(-1)
    return torch.isneginf(mask).all(-1)


def _revive(mask: Tensor, dead: Tensor) -> Tensor:
    """Unmask every key of dead rows (their result is overwritten afterwards)."""
    if mask.dtype == torch.bool:
        return mask | dead.unsqueeze(-1)
    return mask.masked_fill(dead.unsqueeze(-1), 0.0)


def _expand_kv(x: Tensor, heads: int) -> Tensor:
    """``(B, Hkv, K, D) -> (B, H, K, D)``: head h reads kv head ``h // (H / Hkv)``."""
    groups = heads // x.shape[1]
    return x if groups == 1 else x.repeat_interleave(groups, dim=1)


def softmax_attention(
    q: Float[Tensor, "batch head query dim"],
    k: Float[Tensor, "batch kv_head key dim"],
    v: Float[Tensor, "batch kv_head key dim_v"],
    mask: Mask | None,
    scale: float,
    need_stats: bool,
    causal: bool = False,
) -> CarrierOutput:
    r"""Softmax attention as the gradient of the empirical log-normalizer.

    $$G(\eta) = \log\sum_n e^{k_n^\top\eta + b_n}, \qquad
    \mathrm{out} = \sum_n \operatorname{softmax}_n(k_n^\top\eta + b_n)\, v_n, \qquad \eta = \beta q$$

    Args:
        q, k, v: per-head queries ``(B, H, Q, D)``, keys ``(B, Hkv, K, D)``, values
            ``(B, Hkv, K, Dv)``.
        mask: boolean keep-mask or additive bias $b$ broadcasting to ``(B, H, Q, K)``, or ``None``.
        scale: $\beta$.
        need_stats: also return the weights and $G$ (then computed explicitly, not fused).
        causal: instead of ``mask`` (which must then be ``None``), query $i$ sees keys $j \le i$
            of as many keys as queries; the fused kernel skips the masked half.

    Returns:
        ``CarrierOutput``; fully masked rows, and every row when there are no keys, give zeros and
        $G = -\infty$.

    Claims A1, A3. Without stats it dispatches to ``scaled_dot_product_attention``.
    """
    heads = q.shape[1]
    fused = not need_stats and k.shape[-2] > 0  # no keys: the explicit path (empty on that axis) on every device
    if causal:
        if mask is not None or q.shape[-2] != k.shape[-2]:
            raise ValueError("causal=True needs mask=None and as many keys as queries")
        if fused:
            out = F.scaled_dot_product_attention(q, k, v, scale=scale, is_causal=True, enable_gqa=heads != k.shape[1])
            return CarrierOutput(out, None, None)
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    dead = None
    if mask is not None:  # revived unconditionally: testing dead.any() would read it back to the host
        dead = _dead_rows(mask)
        mask = _revive(mask, dead)
    if fused:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=scale, enable_gqa=heads != k.shape[1]
        )  # (B, H, Q, Dv)
        if dead is not None:
            out = out.masked_fill(dead.unsqueeze(-1), 0.0)
        return CarrierOutput(out, None, None)
    logits = scale * (q @ _expand_kv(k, heads).mT)  # (B, H, Q, K)
    if mask is not None:
        logits = logits.masked_fill(~mask, -torch.inf) if mask.dtype == torch.bool else logits + mask
    weights, log_z = softmax_with_log_normalizer(logits)  # (B, H, Q, K), (B, H, Q)
    if dead is not None:
        log_z = log_z.masked_fill(dead, -torch.inf)
        weights = weights.masked_fill(dead.unsqueeze(-1), 0.0)
    out = weights @ _expand_kv(v, heads)  # (B, H, Q, Dv)
    return CarrierOutput(out, weights, log_z) if need_stats else CarrierOutput(out, None, None)


class Carrier(nn.Module):
    r"""Base class of carriers: ``forward(q, k, v, mask, scale, need_stats) -> CarrierOutput``.

    Every registered subclass declares two properties, which callers read instead of its name:

    - ``uses_keys``: its output depends on the keys (``False``: the key projection gets no gradient);
    - ``softmax``: its output is exactly softmax attention $\operatorname{softmax}(\beta q k^\top + b)\, v$,
      so code that recomputes heads as softmax attention reproduces it.

    Args:
        num_heads: number of query heads $H$.
        head_dim: per-head dimension $D$ of queries and keys.
    """

    fused_causal = False  # True: accepts ``causal=True`` with ``mask=None`` (module docstring)
    uses_keys: ClassVar[bool]
    softmax: ClassVar[bool]

    def __init__(self, num_heads: int, head_dim: int) -> None:
        super().__init__()
        for name, value in (("num_heads", num_heads), ("head_dim", head_dim)):
            positive_int(name, value)
        self.num_heads = num_heads
        self.head_dim = head_dim


_CARRIERS: dict[str, Callable[..., Carrier]] = {}


def register_carrier(name: str) -> Callable[[type[Carrier]], type[Carrier]]:
    """Class decorator: make ``make_carrier(name, ...)`` build this carrier.

    The class must declare ``uses_keys`` and ``softmax`` as bools (see ``Carrier``).
    """

    def decorate(cls: type[Carrier]) -> type[Carrier]:
        for prop in ("uses_keys", "softmax"):
            if not isinstance(getattr(cls, prop, None), bool):
                raise TypeError(f"carrier {name!r} ({cls.__name__}) must declare {prop} as a bool class attribute")
        if name in _CARRIERS:
            raise ValueError(f"a carrier named {name!r} is already registered")
        _CARRIERS[name] = cls
        return cls

    return decorate


def carrier_names() -> list[str]:
    """Names of the registered carriers, sorted."""
    return sorted(_CARRIERS)


def carrier_class(name: str) -> type[Carrier]:
    """The class registered as ``name`` (its ``uses_keys``, ``softmax`` without building it)."""
    if name not in _CARRIERS:
        raise ValueError(f"carrier must be one of {carrier_names()}, got {name!r}")
    return _CARRIERS[name]


def make_carrier(name: str, *, num_heads: int, head_dim: int, **options: object) -> Carrier:
    """Build the carrier registered as ``name`` for ``num_heads`` heads of size ``head_dim``.

    ``options`` go to the carrier's constructor (e.g. ``covariance="lowrank", rank=4``).
    """
    cls = carrier_class(name)
    try:
        return cls(num_heads, head_dim, **options)
    except TypeError as err:
        raise TypeError(f"carrier_options for {name!r}: {err}") from err


@register_carrier("empirical")
class EmpiricalCarrier(Carrier):
    r"""$h = \sum_n \delta_{k_n}$: standard softmax attention (claims A1, A3); no parameters."""

    fused_causal = True
    uses_keys = True
    softmax = True

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, need_stats: bool, causal: bool = False
    ):
        return softmax_attention(q, k, v, mask, scale, need_stats, causal)


class _CovarianceCarrier(Carrier):
    r"""A learnable positive semi-definite $\Sigma_h$ per head.

    Args:
        covariance: ``"cholesky"``: $\Sigma = L L^\top$ with $L$ lower triangular ``(H, D, D)``;
            ``"lowrank"``: $\Sigma = U U^\top + \operatorname{diag}(s^2)$ with $U$ ``(H, D, rank)``.
        rank: columns of $U$ (``"lowrank"`` only).
        init_variance: $\Sigma$ starts at ``init_variance * I`` (cholesky) or near it (lowrank).
    """

    def __init__(
        self,
        num_heads: int,
        head_dim: int,
        *,
        covariance: str = "cholesky",
        rank: int | None = None,
        init_variance: float = 1e-2,
    ) -> None:
        super().__init__(num_heads, head_dim)
        if covariance not in ("cholesky", "lowrank"):
            raise ValueError(f"covariance must be 'cholesky' or 'lowrank', got {covariance!r}")
        if not isinstance(init_variance, int | float) or not math.isfinite(init_variance) or init_variance < 0:
            raise ValueError(f"init_variance must be a finite number >= 0, got {init_variance!r}")
        self.covariance_kind = covariance
        eye = torch.eye(head_dim).expand(num_heads, head_dim, head_dim)
        if covariance == "cholesky":
            if rank is not None:
                raise ValueError(f"rank applies to covariance='lowrank' only, got rank={rank!r}")
            self.factor = nn.Parameter(math.sqrt(init_variance) * eye.clone())  # (H, D, D)
        else:
            if not isinstance(rank, int) or isinstance(rank, bool) or not 1 <= rank <= head_dim:
                raise ValueError(f"rank must be an int in [1, {head_dim}] for covariance='lowrank', got {rank!r}")
            std = math.sqrt(init_variance / (2 * rank))
            self.factor = nn.Parameter(std * torch.randn(num_heads, head_dim, rank))  # (H, D, r)
            self.diag_sqrt = nn.Parameter(torch.full((num_heads, 1, head_dim), math.sqrt(init_variance / 2)))

    def covariance(self) -> Float[Tensor, "head dim dim"]:
        r"""$\Sigma_h$ for every head, ``(H, D, D)``: positive semi-definite by construction."""
        if self.covariance_kind == "cholesky":
            chol = self.factor.tril()
            return chol @ chol.mT
        return self.factor @ self.factor.mT + torch.diag_embed(self.diag_sqrt.squeeze(-2) ** 2)

    @torch.no_grad()
    def set_covariance(self, sigma: Float[Tensor, "head dim dim"]) -> None:
        r"""Set $\Sigma_h$ exactly (``"cholesky"`` only); it must be symmetric positive semi-definite."""
        if self.covariance_kind != "cholesky":
            raise ValueError(f"set_covariance needs covariance='cholesky', this carrier uses {self.covariance_kind!r}")
        shape = (self.num_heads, self.head_dim, self.head_dim)
        if not isinstance(sigma, Tensor) or not sigma.is_floating_point():
            raise TypeError(f"sigma must be a floating torch.Tensor, got {type(sigma).__name__}")
        if tuple(sigma.shape) != shape:
            raise ValueError(f"sigma must have shape {shape}, got {tuple(sigma.shape)}")
        if not torch.isfinite(sigma).all():
            raise ValueError("sigma must be finite, got NaN or infinity")
        sigma = sigma.double()
        scale = sigma.abs().amax().clamp_min(1.0).item()
        if (sigma - sigma.mT).abs().amax().item() > 1e-8 * scale:
            raise ValueError("sigma must be symmetric")
        evals, evecs = torch.linalg.eigh(sigma)
        if evals.min().item() < -1e-10 * scale:
            raise ValueError(f"sigma must be positive semi-definite, smallest eigenvalue {evals.min().item():.3g}")
        root = evecs * evals.clamp_min(0.0).sqrt().unsqueeze(-2)  # (H, D, D), root root^T = sigma
        r = torch.linalg.qr(root.mT, mode="r").R  # root^T = Q R  ->  sigma = R^T R
        self.factor.copy_(r.mT.to(self.factor.dtype))

    def apply_covariance(self, eta: Float[Tensor, "batch head query dim"]) -> Float[Tensor, "batch head query dim"]:
        r"""$\Sigma_h \eta$ for every head and query, without forming $\Sigma$ for low rank."""
        if self.covariance_kind == "cholesky":
            return torch.einsum("bhqd,hde->bhqe", eta, self.covariance())
        thin = torch.einsum("bhqd,hdr->bhqr", eta, self.factor)  # (B, H, Q, r)
        return torch.einsum("bhqr,hdr->bhqd", thin, self.factor) + eta * self.diag_sqrt**2

    def _linear_term(self, q: Tensor, scale: float, need_stats: bool) -> tuple[Tensor, Tensor | None]:
        r"""$\Sigma\eta$ and (if ``need_stats``) $\tfrac12 \eta^\top\Sigma\eta$, with $\eta = \beta q$."""
        if q.shape[1] != self.num_heads or q.shape[-1] != self.head_dim:
            raise ValueError(
                f"q has {q.shape[1]} heads of size {q.shape[-1]}, this carrier was built for "
                f"{self.num_heads} heads of size {self.head_dim}"
            )
        eta = scale * q
        sigma_eta = self.apply_covariance(eta)  # (B, H, Q, D)
        return sigma_eta, 0.5 * (eta * sigma_eta).sum(-1) if need_stats else None


def _check_value_dim(q: Tensor, v: Tensor, name: str) -> None:
    if v.shape[-1] != q.shape[-1]:
        raise ValueError(
            f"the {name} carrier adds Sigma eta to the values: value head size {v.shape[-1]} "
            f"must equal the query head size {q.shape[-1]}"
        )


@register_carrier("gaussian_mixture")
class GaussianMixtureCarrier(_CovarianceCarrier):
    r"""$h = \sum_n \pi_n \mathcal N(k_n, \Sigma_h)$ with one covariance per head (claim A6).

    $$G(\eta) = \tfrac12 \eta^\top\Sigma\eta + \log\sum_n \pi_n e^{k_n^\top\eta}, \qquad
    \nabla G = \Sigma\eta + \sum_n \operatorname{softmax}_n(\log\pi_n + k_n^\top\eta)\, v_n$$

    The weights are those of softmax attention; $\log \pi_n$ is the additive mask (uniform
    $\pi$ without one; a constant shift of $\log\pi$ changes $G$ by that constant only).
    Seed 000 Prop. 2 (its last display has a stray gradient-of-log inside the sum).
    """

    fused_causal = True
    uses_keys = True
    softmax = False  # softmax attention plus Sigma eta

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, need_stats: bool, causal: bool = False
    ):
        _check_value_dim(q, v, "gaussian_mixture")
        base = softmax_attention(q, k, v, mask, scale, need_stats, causal)
        sigma_eta, quad = self._linear_term(q, scale, need_stats)
        if k.shape[-2] == 0:  # no keys: the empty carrier, like a fully masked row
            sigma_eta = torch.zeros_like(sigma_eta)
        elif mask is not None:
            sigma_eta = sigma_eta.masked_fill(_dead_rows(mask).unsqueeze(-1), 0.0)
        log_z = None if base.log_normalizer is None else base.log_normalizer + quad
        return CarrierOutput(base.output + sigma_eta, base.weights, log_z)


@register_carrier("mixture_lower_bound")
class MixtureLowerBoundCarrier(_CovarianceCarrier):
    r"""Jensen's lower bound of the Gaussian-mixture log-normalizer (claim A7).

    $$G_{LB}(\eta) = \sum_n \pi_n\big(\tfrac12 \eta^\top\Sigma\eta + k_n^\top\eta\big) \le G(\eta),
    \qquad \nabla G_{LB} = \Sigma\eta + \sum_n \pi_n v_n$$

    with $\sum_n \pi_n = 1$: $\pi = \operatorname{softmax}(b)$ of the additive mask $b$ over the
    kept keys (uniform without one). The weights do not depend on the query. Each head has one
    $\Sigma_h$ (seed 000 Prop. 3 allows one per atom; a shared one keeps the layer linear in
    the values). Claim A7.
    """

    uses_keys = False  # pi depends on the mask only
    softmax = False

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float, need_stats: bool):
        _check_value_dim(q, v, "mixture_lower_bound")
        heads = q.shape[1]
        k, v = _expand_kv(k, heads), _expand_kv(v, heads)  # (B, H, K, D)
        sigma_eta, quad = self._linear_term(q, scale, need_stats)
        if mask is None:  # no keys at all: an empty carrier, like a fully masked row
            pi = q.new_full((1, 1, 1, k.shape[-2]), 1.0 / max(k.shape[-2], 1))
        else:
            bias = mask.to(q.dtype).log() if mask.dtype == torch.bool else mask.to(q.dtype)
            dead = _dead_rows(mask)
            pi = torch.softmax(_revive(bias, dead), dim=-1).masked_fill(dead.unsqueeze(-1), 0.0)
        shape = (*torch.broadcast_shapes(pi.shape[:-1], q.shape[:-1]), k.shape[-2])
        pi = pi.expand(shape)  # (B, H, Q, K)
        alive = (pi.sum(-1) > 0).to(q.dtype)  # (B, H, Q)
        out = pi @ v + sigma_eta * alive.unsqueeze(-1)
        if not need_stats:
            return CarrierOutput(out, None, None)
        mean_key = pi @ k  # (B, H, Q, D)
        log_z = (quad + (scale * q * mean_key).sum(-1)).masked_fill(alive == 0, -torch.inf)
        return CarrierOutput(out, pi, log_z)
