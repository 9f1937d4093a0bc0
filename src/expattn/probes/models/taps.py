r"""Taps on a model's attention kernel: the exact $q, k, v$, logit scale, soft-cap and additive bias it uses.

$$z_h = \operatorname{softmax}\bigl(\operatorname{cap}(s\, q_h k_h^\top) + B\bigr)\, v_h,\qquad
\operatorname{cap}(u) = c \tanh(u / c)\ \text{(or } u\text{)}$$

with $q, k, v$ ``(batch, head, token, head_dim)`` after every position and normalization step the
model applies (rotary, partial rotary, q/k norms, fused or grouped projections), and $B$
``(1, head | 1, token, token)`` the additive bias holding the causal, padding and sliding-window
masks and the relative-position bias (T5, ALiBi). Two ways in, both reading the model's own code:

- HuggingFace modules that call ``ALL_ATTENTION_FUNCTIONS`` get the implementation ``"expattn"``:
  it records the call and then runs PyTorch SDPA (or, with a soft-cap, which SDPA lacks, the
  module's own eager function), with masks materialised as additive floats (``eager_mask``);
- modules with their own ``_attn(query, key, value, attention_mask)`` method (GPT-Neo; GPT-J in transformers
  releases before it moved to the interface, see ``wrapper_of``) get that method wrapped on the instance,
  Falcon's calls to torch's SDPA are recorded while it runs, BLOOM's ``_reshape`` gives $q, k, v$ and its
  ALiBi tensor the bias (``WRAPPERS``).

A tap also keeps the attention module's call arguments, so ``Replay`` can run the module on any
input of the same length and read $q, k, v$ (the call stops at the kernel then): that is how the probe
recomputes attention on inputs the model never saw (E7) and in float64 (E5).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn

IMPLEMENTATION = "expattn"
DROPPED = ("past_key_values", "layer_past", "use_cache", "hidden_states", "output_attentions")
AUTOTAP = False  # while True (``expattn.probes.models.generic``), a module calling the kernel gets a tap
KNOWN_KWARGS = {"dropout", "deterministic", "scaling", "softcap", "position_bias", "sliding_window", "is_causal",
                "position_ids", "use_cache", "encoder_hidden_states", "output_attentions", "cache_position",
                "layer_idx"}


class Stop(Exception):
    """Raised by a tap's kernel while replaying: $q, k, v$ are recorded, the rest of the call is not needed."""


@dataclass
class Logits:
    """How a head's logits are formed from $q, k$: scale $s$, soft-cap $c$ (None: none), additive bias
    ``(1, head | 1, token, token)`` or None, whether SDPA added a causal mask itself, and whether the kernel
    rounds them to the dtype of $q$ (eager code; fused kernels form them in float32)."""

    scale: float
    softcap: float | None
    bias: Float[Tensor, "1 head_or_1 query key"] | None
    causal: bool
    rounded: bool = False


class Tap:
    """Per attention module: the last call's arguments, its logits recipe and its head outputs.

    Attributes:
        module: the attention module (what calls the kernel).
        call: ``(args, kwargs)`` of the module's last forward call.
        logits: ``Logits`` of its last kernel call; heads: ``(batch, token, heads*head_dim)`` kernel output.
        replaying: while True the kernel stores ``qkv`` and stops the call (``Stop``) instead of attending.
    """

    def __init__(self, module: nn.Module):
        self.module = module
        self.call: tuple[tuple, dict] | None = None
        self.logits: Logits | None = None
        self.heads: Tensor | None = None
        self.qkv: tuple[Tensor, Tensor, Tensor] | None = None
        self.replaying = False
        self.passive = False  # True: the kernel is not read, only the module's call and output
        self.handle = module.register_forward_pre_hook(self._remember, with_kwargs=True)
        module._expattn_tap = self

    def _remember(self, _module: nn.Module, args: tuple, kwargs: dict) -> None:
        self.call = (args, kwargs)

    def kernel(
        self,
        query: Float[Tensor, "batch head query head_dim"],
        key: Float[Tensor, "batch kv_head key head_dim"],
        value: Float[Tensor, "batch kv_head key head_dim"],
        bias: Float[Tensor, "batch_or_1 head_or_1 query key"] | Bool[Tensor, "batch_or_1 head_or_1 query key"] | None,
        scale: float,
        softcap: float | None,
        causal: bool,
        rounded: bool = False,
    ) -> None:
        """Record one kernel call's logits recipe; while replaying, store $q, k, v$ and raise ``Stop``.

        ``query`` ``(batch, head, token, head_dim)``, ``key`` and ``value`` ``(batch, kv_head, token, head_dim)``;
        ``bias`` ``(batch | 1, head | 1, token, token)`` additive (float) or a boolean mask (True: attend), or None;
        ``rounded``: the kernel forms the logits in the dtype of ``query``.
        """
        if self.replaying:
            self.qkv = (query, key, value)
            raise Stop
        if bias is not None:
            if bias.dtype == torch.bool:
                bias = torch.zeros(bias.shape, dtype=query.dtype, device=bias.device).masked_fill(
                    ~bias, torch.finfo(query.dtype).min)
            if bias.shape[0] > 1:
                if not torch.equal(bias, bias[:1].expand_as(bias)):
                    raise ValueError("the probe takes unpadded batches: every sequence must have the same mask")
                bias = bias[:1]
        self.logits = Logits(float(scale), softcap, bias, causal and bias is None, rounded)
        return None



def _tap_of(module: nn.Module) -> Tap | None:
    return getattr(module, "_expattn_tap", None)


def _interface(module, query, key, value, attention_mask, **kwargs):
    """The ``"expattn"`` attention implementation (see module docstring)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    tap = _tap_of(module)
    if tap is None and AUTOTAP:
        tap = Tap(module)
    if tap is not None:
        unknown = sorted(set(kwargs) - KNOWN_KWARGS)
        if unknown:
            raise ValueError(f"{type(module).__name__} passes {unknown} to its attention kernel, which the probe "
                             "does not read; the logits cannot be recomputed")
        scale = kwargs.get("scaling") or query.shape[-1] ** -0.5
        bias = attention_mask
        if kwargs.get("position_bias") is not None:
            bias = kwargs["position_bias"] if bias is None else kwargs["position_bias"] + bias
        causal = bool(kwargs.get("is_causal", getattr(module, "is_causal", False))) and query.shape[2] > 1
        tap.kernel(query, key, value, bias, scale, kwargs.get("softcap"), causal,
                   rounded=kwargs.get("softcap") is not None)  # the eager function below
    if kwargs.get("softcap") is not None:
        out = sys.modules[type(module).__module__].eager_attention_forward(module, query, key, value,
                                                                           attention_mask, **kwargs)
    else:
        out = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if tap is not None:
        tap.heads = out[0].flatten(-2)  # (B, T, H*dh)
    return out


def register_implementation() -> None:
    """Make ``"expattn"`` a HuggingFace attention implementation (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(IMPLEMENTATION, _interface)
    AttentionMaskInterface.register(IMPLEMENTATION, eager_mask)


def _neo_bias(module: nn.Module, query: Tensor, key: Tensor, mask: Tensor | None) -> tuple[float, Tensor | None]:
    t, s = query.shape[-2], key.shape[-2]
    allowed = module.bias[:, :, s - t : s, :s]
    bias = torch.zeros(allowed.shape, dtype=torch.float32, device=query.device).masked_fill(
        ~allowed, torch.finfo(torch.float32).min)
    return 1.0, bias if mask is None else bias + mask


def _gptj_bias(module: nn.Module, query: Tensor, key: Tensor, mask: Tensor | None) -> tuple[float, Tensor | None]:
    return 1.0 / float(module.scale_attn), mask


# class name -> (module, q, k, mask) -> (scale, additive bias): the logits of an own ``_attn`` method
METHOD_KERNELS: dict[str, Callable] = {"GPTNeoSelfAttention": _neo_bias, "GPTJAttention": _gptj_bias}


def _wrap_inline_sdpa(module: nn.Module, tap: Tap) -> None:
    """While ``module`` runs, ``torch.nn.functional.scaled_dot_product_attention`` is recorded by ``tap``."""
    own = type(module).forward.__get__(module)
    functional = torch.nn.functional

    def forward(*args, **kwargs):
        real = functional.scaled_dot_product_attention

        def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **rest):
            tap.kernel(query, key, value, attn_mask, scale or query.shape[-1] ** -0.5, None,
                       is_causal and query.shape[2] > 1)
            out = real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                       scale=scale, **rest)
            tap.heads = out.transpose(1, 2).flatten(-2)
            return out

        functional.scaled_dot_product_attention = sdpa
        try:
            return own(*args, **kwargs)
        finally:
            functional.scaled_dot_product_attention = real

    module.forward = forward


def _additive(mask: Tensor, dtype: torch.dtype) -> Tensor:
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


def _wrap_bloom(module: nn.Module, tap: Tap) -> None:
    """BLOOM: $q, k, v$ from ``_reshape``; logits ``inv_norm_factor`` $q k^\top$ + ``beta`` ALiBi + mask."""
    reshape, merge = type(module)._reshape.__get__(module), type(module)._merge_heads.__get__(module)

    def _reshape(fused):
        q, k, v = reshape(fused)
        if tap.replaying:
            tap.kernel(q, k, v, None, 1.0, None, False)
        args, kwargs = tap.call
        alibi = kwargs["alibi"] if "alibi" in kwargs else args[2]
        mask = kwargs["attention_mask"] if "attention_mask" in kwargs else args[3]
        bias = module.beta * alibi.view(q.shape[0], q.shape[1], 1, k.shape[2])
        bias = bias if mask is None else bias + _additive(mask, bias.dtype)
        tap.kernel(q, k, v, bias, module.inv_norm_factor, None, False, rounded=True)  # baddbmm in the dtype
        return q, k, v

    def _merge_heads(x):
        out = merge(x)
        tap.heads = out
        return out

    module._reshape, module._merge_heads = _reshape, _merge_heads




def _wrap_method(module: nn.Module, tap: Tap) -> None:
    own = module._attn
    logits = METHOD_KERNELS[type(module).__name__]

    def _attn(query, key, value, attention_mask=None, *rest):
        scale, bias = logits(module, query, key, attention_mask)
        tap.kernel(query, key, value, bias, scale, None, False)
        out, weights = own(query, key, value, attention_mask, *rest)
        tap.heads = out.transpose(1, 2).flatten(-2)
        return out, weights

    module._attn = _attn


# class name -> how its kernel is tapped: modules that do not call HuggingFace's attention interface
WRAPPERS: dict[str, Callable[[nn.Module, Tap], None]] = {
    **dict.fromkeys(METHOD_KERNELS, _wrap_method),  # their own _attn(query, key, value, mask)
    "FalconAttention": _wrap_inline_sdpa,  # torch's SDPA called in its forward
    "BloomAttention": _wrap_bloom,  # ALiBi through baddbmm in its forward
}


def wrapper_of(module: nn.Module) -> Callable[[nn.Module, Tap], None] | None:
    """How ``module``'s kernel is tapped when it does not call HuggingFace's attention interface, or None when it
    does (GPT-J's attention calls the interface in recent transformers releases and has no ``_attn`` method there)."""
    name = type(module).__name__
    if name in METHOD_KERNELS and not hasattr(module, "_attn"):
        return None
    return WRAPPERS.get(name)


def install(model: nn.Module) -> list[Tap]:
    """Taps on the modules of ``model`` listed in ``WRAPPERS``, and the ``"expattn"`` implementation for the
    others (a module calling it is tapped on a forward pass run with ``AUTOTAP`` set)."""
    register_implementation()
    taps = []
    for module in model.modules():
        if (wrap := wrapper_of(module)) is not None and getattr(module, "_expattn_tap", None) is None:
            tap = Tap(module)
            wrap(module, tap)
            taps.append(tap)
    if hasattr(model, "set_attn_implementation") and getattr(model.config, "_attn_implementation", None):
        model.set_attn_implementation(IMPLEMENTATION)
    return taps


def tap_all(modules: list[nn.Module]) -> list[Tap]:
    """Taps on ``modules`` (those seen calling the kernel), reusing existing ones."""
    return [_tap_of(m) or Tap(m) for m in modules]


def _cast(value: object, dtype: torch.dtype) -> object:
    if torch.is_tensor(value) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, tuple | list):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _copy(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` without its tap and wrapped kernel (which hold the last call's tensors)."""
    names = ("_expattn_tap", "_attn", "forward", "_reshape", "_merge_heads")
    saved = {k: module.__dict__.pop(k) for k in names if k in module.__dict__}
    try:
        return copy.deepcopy(module)
    finally:
        module.__dict__.update(saved)


class Replay:
    """$x \\mapsto (q, k, v)$ of one attention module, by calling it with its last recorded arguments and
    ``x`` as hidden states. ``to(dtype)`` gives the same map on a copy of the module in ``dtype``."""

    def __init__(self, origin: Tap, runner: Tap | None = None, dtype: torch.dtype | None = None):
        self.origin, self.runner, self.dtype = origin, runner or origin, dtype
        self._copies: dict[torch.dtype, Replay] = {}

    def to(self, dtype: torch.dtype) -> Replay:
        if dtype == (self.dtype or next(self.origin.module.parameters()).dtype):
            return self
        if dtype not in self._copies:
            module = _copy(self.origin.module).to(dtype)
            for sub in module.modules():
                sub._forward_hooks.clear()
                sub._forward_pre_hooks.clear()
            runner = Tap(module)
            if (wrap := wrapper_of(module)) is not None:
                wrap(module, runner)
            self._copies[dtype] = Replay(self.origin, runner, dtype)
        return self._copies[dtype]

    def forget(self) -> None:
        """Drop the copies ``to`` made (and theirs): a run's copies of the module in other dtypes go with the run
        instead of staying with the model's reading as long as the model is held."""
        for replay in self._copies.values():
            replay.forget()
        self._copies.clear()

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.origin.call is None:
            raise ValueError(f"{type(self.origin.module).__name__} has not run yet; nothing to replay")
        args, kwargs = self.origin.call
        if self.dtype is not None:
            args, kwargs = _cast(args, self.dtype), _cast(kwargs, self.dtype)
        kwargs = {k: v for k, v in kwargs.items() if k not in DROPPED}
        tap = self.runner
        tap.replaying = True
        try:
            if args:
                tap.module.forward(x, *args[1:], **kwargs)
            else:
                tap.module.forward(hidden_states=x, **kwargs)
        except Stop:
            pass
        try:
            q, k, v = tap.qkv
        finally:
            tap.replaying, tap.qkv = False, None
        return q, k, v
