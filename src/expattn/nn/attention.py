r"""Multi-head attention as a gradient step on each head's log-normalizer.

$$\mathrm{head}_h(x_i) = \nabla_\eta G_h(\eta)\big|_{\eta = \beta W^q_h x_i}, \qquad
G_h(\eta) = \log \int h_h(y)\, e^{y^\top\eta}\, dy,$$

where the carrier $h_h$ sits on the keys $W^k_h x_j$ (claim A3) and is chosen by name from
``expattn.nn.carriers``. ``ExpFamAttention`` is the module (projections, heads, masks, RoPE);
``exp_fam_attention`` is the functional form on per-head tensors.

Masks follow ``expattn.nn.masks`` (boolean True = the key takes part, or an additive float bias).
A query whose keys are all masked gets output zero, weights zero and log-normalizer $-\infty$, and so
does every query when there are no keys (the empty carrier); no queries or batch 0 give empty results.
A non-finite output, or non-finite per-head queries or keys (whose NaN logits the fused kernel turns into finite
numbers), names the first non-finite input, then parameter, before blaming an overflow.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn

from expattn.arguments import positive_int
from expattn.core.validate import check_finite, check_output, check_output_of, require_finite
from expattn.nn.carriers import Carrier, CarrierOutput, make_carrier
from expattn.nn.hooks import HookPoint
from expattn.nn.masks import attention_mask
from expattn.validation import validate_enabled

Rotary = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


def rotate_half_rope(
    q: Float[Tensor, "batch head query dim"],
    k: Float[Tensor, "batch kv_head key dim"],
    cos: Float[Tensor, "*#batch token dim"],
    sin: Float[Tensor, "*#batch token dim"],
) -> tuple[Tensor, Tensor]:
    r"""Rotary position embedding in the rotate-half convention (Llama, GPT-NeoX).

    $$x \mapsto x \odot \cos + \operatorname{rot}(x) \odot \sin, \qquad
    \operatorname{rot}(x_1, x_2) = (-x_2, x_1)$$

    ``cos``/``sin`` are ``(batch or 1, token, dim)``; queries use the last ``query`` rows and
    keys the last ``key`` rows. Pass ``functools.partial(rotate_half_rope, cos=..., sin=...)``
    as ``rotary`` to ``ExpFamAttention.forward``.
    """

    def rotate(x: Tensor, c: Tensor, s: Tensor) -> Tensor:
        c, s = c[..., -x.shape[-2] :, :].unsqueeze(1), s[..., -x.shape[-2] :, :].unsqueeze(1)
        x1, x2 = x.chunk(2, dim=-1)
        return x * c + torch.cat((-x2, x1), dim=-1) * s

    return rotate(q, cos, sin), rotate(k, cos, sin)


def exp_fam_attention(
    q: Float[Tensor, "batch head query dim"],
    k: Float[Tensor, "batch kv_head key dim"],
    v: Float[Tensor, "batch kv_head key dim_v"],
    *,
    carrier: Carrier | str = "empirical",
    key_padding_mask: Bool[Tensor, "batch key"] | None = None,
    attn_mask: Tensor | None = None,
    causal: bool = False,
    scale: float | None = None,
    need_weights: bool = False,
) -> CarrierOutput:
    r"""Per-head attention $\nabla_\eta G(\eta)$ with $\eta = \beta q$, functional form.

    Args:
        q, k, v: ``(B, H, Q, D)``, ``(B, Hkv, K, D)``, ``(B, Hkv, K, Dv)``; ``H`` a multiple of ``Hkv``.
        carrier: a ``Carrier`` or a registered name (a name builds the carrier's defaults).
        key_padding_mask, attn_mask, causal: see ``attention_mask``.
        scale: $\beta > 0$; ``None`` means $1/\sqrt{D}$.
        need_weights: also return the weights ``(B, H, Q, K)`` and $G$ ``(B, H, Q)``.

    Returns:
        ``CarrierOutput(output (B, H, Q, Dv), weights, log_normalizer)``. Claims A3, A6, A7.
    """
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor) or not x.is_floating_point():
            raise TypeError(f"{name} must be a floating torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
        if x.ndim != 4:
            raise ValueError(f"{name} must have shape (batch, head, token, dim), got {tuple(x.shape)}")
    batch, heads, _, dim = q.shape
    if k.shape[-1] != dim:
        raise ValueError(f"k has head size {k.shape[-1]}, expected {dim} to match q")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(f"k {tuple(k.shape)} and v {tuple(v.shape)} must agree in batch, kv heads and keys")
    if k.shape[0] != batch or heads % k.shape[1]:
        raise ValueError(f"k of shape {tuple(k.shape)}: batch must be {batch} and kv heads must divide {heads}")
    if scale is None:
        scale = 1.0 / math.sqrt(dim)
    elif not isinstance(scale, int | float) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale (beta) must be a finite number > 0, got {scale!r}")
    if isinstance(carrier, str):
        carrier = make_carrier(carrier, num_heads=heads, head_dim=dim).to(q.device, q.dtype)
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_finite(name, x)
    out = _attend(q, k, v, carrier, key_padding_mask, attn_mask, causal, float(scale), need_weights)
    if validate_enabled():
        check_output("attention output", out.output, OVERFLOW)
    return out


def _attend(
    q: Tensor, k: Tensor, v: Tensor, carrier: Carrier, key_padding_mask: Tensor | None, attn_mask: Tensor | None,
    causal: bool, scale: float, need_weights: bool,
) -> CarrierOutput:
    """``exp_fam_attention`` on arguments already checked (``ExpFamAttention`` builds them valid)."""
    plain = key_padding_mask is None and attn_mask is None and q.shape[2] == k.shape[2]
    if causal and plain and getattr(carrier, "fused_causal", False):
        return carrier(q, k, v, None, scale, need_weights, True)  # causal: the fused kernel skips the masked half
    batch, heads, queries, _ = q.shape
    mask = attention_mask(
        batch, heads, queries, k.shape[2], key_padding_mask=key_padding_mask, attn_mask=attn_mask, causal=causal,
        dtype=q.dtype, device=q.device,
    )
    return carrier(q, k, v, None if mask is None else mask.to(q.device), scale, need_weights)


OVERFLOW = "the logits beta * q.k overflow the floating range; scale the inputs or beta down"
OVERFLOW_OUT = f"{OVERFLOW} (or out_proj's product overflows)"

# Open ``explicit_attention`` blocks. A plain module global rather than a ContextVar: torch.compile
# traces a global read (and guards on its value) but breaks the graph at ``ContextVar.get``.
_explicit_depth = 0


@contextmanager
def explicit_attention() -> Iterator[None]:
    """Inside this block ``ExpFamAttention`` computes its heads explicitly (logits, softmax, products)
    instead of calling the fused kernel: slower, but twice differentiable, which torch's CPU flash
    kernel is not (needed for gradients of Jacobian penalties, see ``ImplicitAttention.jacobian_penalty``).
    The switch is process-wide (not per thread)."""
    global _explicit_depth
    _explicit_depth += 1
    try:
        yield
    finally:
        _explicit_depth -= 1


def _check_input(name: str, x: object, width: int) -> None:
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"{name} must be a floating torch.Tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim != 3 or x.shape[-1] != width:
        raise ValueError(f"{name} must have shape (batch, token, {width}), got {tuple(x.shape)}")


@dataclass(frozen=True)
class ExpFamAttentionConfig:
    """Configuration of ``ExpFamAttention``.

    Attributes:
        embed_dim: model width $E$ of the queries' input and of the output.
        num_heads: query heads $H$.
        num_kv_heads: key/value heads (grouped-query attention); ``None`` = ``num_heads``.
        head_dim: per-head size $D$; ``None`` = ``embed_dim // num_heads`` (must divide).
        kdim, vdim: widths of the key and value inputs (cross-attention); ``None`` = ``embed_dim``.
        bias: biases on the four projections.
        beta: inverse temperature $\\beta$; ``None`` = $1/\\sqrt{D}$.
        causal: mask future keys by default.
        carrier: registered carrier name (``expattn.nn.carriers.carrier_names()``).
        carrier_options: keyword options of that carrier.
    """

    embed_dim: int
    num_heads: int
    num_kv_heads: int | None = None
    head_dim: int | None = None
    kdim: int | None = None
    vdim: int | None = None
    bias: bool = True
    beta: float | None = None
    causal: bool = False
    carrier: str = "empirical"
    carrier_options: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        positive_int("embed_dim", self.embed_dim)
        positive_int("num_heads", self.num_heads)
        for name in ("num_kv_heads", "head_dim", "kdim", "vdim"):
            if getattr(self, name) is not None:
                positive_int(name, getattr(self, name))
        if self.head_dim is None and self.embed_dim % self.num_heads:
            raise ValueError(
                f"num_heads={self.num_heads} must divide embed_dim={self.embed_dim} (or give head_dim)"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}")
        if self.beta is not None and (not isinstance(self.beta, int | float) or not math.isfinite(self.beta)
                                      or self.beta <= 0):
            raise ValueError(f"beta must be a finite number > 0 or None, got {self.beta!r}")

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def dim(self) -> int:
        return self.head_dim or self.embed_dim // self.num_heads

    @property
    def scale(self) -> float:
        return self.beta if self.beta is not None else 1.0 / math.sqrt(self.dim)


class PackedRows:
    """Rows ``[start, stop)`` of a packed projection $[W_q; W_k; W_v]$, read like an ``nn.Linear``:
    ``weight`` and ``bias`` are views of the owner's ``in_proj_weight`` / ``in_proj_bias`` (in-place
    writes under ``torch.no_grad`` reach the parameters), and calling it applies them."""

    def __init__(self, owner: ExpFamAttention, start: int, stop: int) -> None:
        self._owner, self._rows = owner, slice(start, stop)
        self.out_features = stop - start

    @property
    def weight(self) -> Tensor:
        return self._owner.in_proj_weight[self._rows]

    @property
    def bias(self) -> Tensor | None:
        bias = self._owner.in_proj_bias
        return None if bias is None else bias[self._rows]

    def __call__(self, x: Tensor) -> Tensor:
        return torch.nn.functional.linear(x, self.weight, self.bias)


class ExpFamAttention(nn.Module):
    r"""Multi-head attention whose heads are gradients of exponential-family log-normalizers.

    $$y = W^o \big[\nabla G_1(\beta W^q_1 x), \dots, \nabla G_H(\beta W^q_H x)\big], \qquad
    \text{carrier atoms } W^k_h x_j, \text{ values } W^v_h x_j$$

    When queries, keys and values share the width $E$ (``kdim``/``vdim`` unset), the three input
    projections live in one parameter ``in_proj_weight`` ($[W_q; W_k; W_v]$, as in
    ``nn.MultiheadAttention``; ``in_proj_bias`` likewise) and self-attention computes them with one
    matrix product; ``q_proj``, ``k_proj``, ``v_proj`` are then ``PackedRows`` views of it.
    Otherwise they are three ``nn.Linear`` modules and ``in_proj_weight`` is ``None``.

    After a forward call with ``need_weights=True``, or while hooks sit on ``hook_weights`` /
    ``hook_log_normalizer``, the module keeps ``last_weights`` ``(B, H, Q, K)`` and
    ``last_log_normalizer`` ``(B, H, Q)`` (the energy of each query is $-G$); otherwise both are
    ``None`` and the fused kernel runs. Claims A3, A6, A7, B1.
    """

    def __init__(self, config: ExpFamAttentionConfig) -> None:
        super().__init__()
        if not isinstance(config, ExpFamAttentionConfig):
            raise TypeError(f"config must be an ExpFamAttentionConfig, got {type(config).__name__}")
        self.config = c = config
        sizes = (c.num_heads * c.dim, c.kv_heads * c.dim, c.kv_heads * c.dim)
        if c.kdim in (None, c.embed_dim) and c.vdim in (None, c.embed_dim):
            self.in_proj_weight = nn.Parameter(torch.empty(sum(sizes), c.embed_dim))
            self.in_proj_bias = nn.Parameter(torch.empty(sum(sizes))) if c.bias else None
            nn.init.kaiming_uniform_(self.in_proj_weight, a=math.sqrt(5))  # nn.Linear's rule, fan-in E
            if self.in_proj_bias is not None:
                nn.init.uniform_(self.in_proj_bias, -1 / math.sqrt(c.embed_dim), 1 / math.sqrt(c.embed_dim))
            edges = (0, sizes[0], sizes[0] + sizes[1], sum(sizes))
            self.q_proj, self.k_proj, self.v_proj = (PackedRows(self, a, b) for a, b in itertools.pairwise(edges))
        else:
            self.register_parameter("in_proj_weight", None)
            self.register_parameter("in_proj_bias", None)
            self.q_proj = nn.Linear(c.embed_dim, sizes[0], bias=c.bias)
            self.k_proj = nn.Linear(c.kdim or c.embed_dim, sizes[1], bias=c.bias)
            self.v_proj = nn.Linear(c.vdim or c.embed_dim, sizes[2], bias=c.bias)
        self._sizes = list(sizes)
        self._dim, self._scale = c.dim, float(c.scale)
        self.out_proj = nn.Linear(c.num_heads * c.dim, c.embed_dim, bias=c.bias)
        self.carrier = make_carrier(c.carrier, num_heads=c.num_heads, head_dim=c.dim, **dict(c.carrier_options))
        self.validate_args: bool | None = None  # None: follow expattn.validation's global switch
        self.hook_weights = HookPoint()
        self.hook_log_normalizer = HookPoint()
        self.last_weights: Tensor | None = None
        self.last_log_normalizer: Tensor | None = None

    def forward(
        self,
        query: Float[Tensor, "batch query embed"],
        key: Float[Tensor, "batch key kdim"] | None = None,
        value: Float[Tensor, "batch key vdim"] | None = None,
        *,
        key_padding_mask: Bool[Tensor, "batch key"] | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool | None = None,
        rotary: Rotary | None = None,
        need_weights: bool = False,
    ) -> Float[Tensor, "batch query embed"]:
        """Attention of ``query`` over ``key``/``value`` (both default to ``query``: self-attention).

        Args:
            query: ``(B, Q, E)``; key ``(B, K, kdim)``; value ``(B, K, vdim)``.
            key_padding_mask, attn_mask: see ``attention_mask`` (True = keep).
            is_causal: overrides ``config.causal``.
            rotary: ``f(q, k) -> (q, k)`` on per-head ``(B, H, T, D)`` tensors (e.g. RoPE).
            need_weights: keep ``last_weights`` and ``last_log_normalizer``.

        Returns:
            ``(B, Q, E)``: ``out_proj`` of ``heads``.
        """
        heads, logits_of = self._heads(query, key, value, key_padding_mask, attn_mask, is_causal, rotary, need_weights)
        out = self.out_proj(heads)
        if validate_enabled(self.validate_args):
            # the inputs are checked first; a non-finite output names the first non-finite parameter, else the cause
            check_output_of("attention output", out, OVERFLOW_OUT, {}, self.named_parameters(), logits_of)
        return out

    def heads(
        self,
        query: Float[Tensor, "batch query embed"],
        key: Float[Tensor, "batch key kdim"] | None = None,
        value: Float[Tensor, "batch key vdim"] | None = None,
        *,
        key_padding_mask: Bool[Tensor, "batch key"] | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool | None = None,
        rotary: Rotary | None = None,
        need_weights: bool = False,
    ) -> Float[Tensor, "batch query heads_dim"]:
        r"""The concatenated head outputs $[\nabla G_1, \dots, \nabla G_H]$ ``(B, Q, H*Dv)``, before ``out_proj``.

        Arguments as ``forward``, which is ``out_proj(heads(...))``.
        """
        out, logits_of = self._heads(query, key, value, key_padding_mask, attn_mask, is_causal, rotary, need_weights)
        if validate_enabled(self.validate_args):
            check_output_of("attention heads", out, OVERFLOW, {}, self.named_parameters(), logits_of)
        return out

    def _heads(
        self, query: Tensor, key: Tensor | None, value: Tensor | None, key_padding_mask: Tensor | None,
        attn_mask: Tensor | None, is_causal: bool | None, rotary: Rotary | None, need_weights: bool,
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``heads`` without the check of its output (``forward`` checks the output of ``out_proj`` instead), and the
        per-head queries and keys the logits are made of: the fused kernel returns finite numbers for NaN logits, so
        a NaN there (a NaN query or key row of a projection) would not reach the output, and the check reads them."""
        c = self.config
        _check_input("query", query, c.embed_dim)
        check = validate_enabled(self.validate_args)
        key = query if key is None else key
        value = key if value is None else value
        if check:
            require_finite("query", query)
            for name, x in (("key", key), ("value", value)):
                if x is not query:
                    require_finite(name, x)
        in_proj = self.in_proj_weight
        if in_proj is not None and key is query and value is query:  # one product, [W_q; W_k; W_v]
            q, k, v = torch.nn.functional.linear(query, in_proj, self.in_proj_bias).split(self._sizes, -1)
        else:
            _check_input("key", key, c.kdim or c.embed_dim)
            _check_input("value", value, c.vdim or c.embed_dim)
            if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
                raise ValueError(
                    f"query {tuple(query.shape)}, key {tuple(key.shape)} and value {tuple(value.shape)} "
                    "must share the batch size, and key and value the number of tokens"
                )
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        batch, queries, keys = query.shape[0], query.shape[1], key.shape[1]
        q = q.view(batch, queries, c.num_heads, self._dim).transpose(1, 2)  # (B, H, Q, D)
        k = k.view(batch, keys, c.kv_heads, self._dim).transpose(1, 2)  # (B, Hkv, K, D)
        v = v.view(batch, keys, c.kv_heads, self._dim).transpose(1, 2)  # (B, Hkv, K, D)
        if rotary is not None:
            q, k = rotary(q, k)
        modules = self._modules  # submodules by name: dict lookups, not one nn.Module.__getattr__ call each
        hooked = bool(modules["hook_weights"]._forward_hooks or modules["hook_log_normalizer"]._forward_hooks)
        stats = need_weights or hooked
        out = _attend(
            q, k, v, modules["carrier"], key_padding_mask, attn_mask, c.causal if is_causal is None else is_causal,
            self._scale, stats or _explicit_depth > 0,
        )
        if stats or self.last_weights is not None or self.last_log_normalizer is not None:  # no Module.__setattr__
            self.last_weights = self.hook_weights(out.weights) if stats else None
            self.last_log_normalizer = self.hook_log_normalizer(out.log_normalizer) if stats else None
        logits_of = {"per-head query (projected, rotated)": q, "per-head key (projected, rotated)": k}
        return out.output.transpose(1, 2).flatten(-2), logits_of  # (B, Q, H*Dv)

    def residual_step(
        self, x: Float[Tensor, "batch token embed"], step_size: float = 1.0, **kwargs: object
    ) -> Float[Tensor, "batch token embed"]:
        r"""The gradient-ascent reading of a residual attention sublayer (claim B1).

        $$x \mapsto x + s\,\mathrm{attention}(x)$$

        With identity projections and one head this is $\eta + s \nabla G(\eta)$, the carrier being
        the cloud $x$ itself. ``kwargs`` go to ``forward`` (masks, rotary, need_weights).
        """
        if not isinstance(step_size, int | float) or not math.isfinite(step_size):
            raise ValueError(f"step_size must be a finite number, got {step_size!r}")
        return x + step_size * self(x, **kwargs)
