"""The roles of a transformer block's submodules, found from one traced forward pass.

One forward pass on a few tokens records every submodule call (first tensor in, first tensor
out). The attention module's head outputs $z$ (from its tap, ``expattn.probes.models.taps``) anchor the
search; the block is the list element holding that module. Inside it the roles are found by what
the tensors are, checked to float32 rounding (``same``):

- the output projection: the leaf call whose input is $z$; its output $o$;
- the attention update $a$: $o$, or the output of a norm reading $o$ (sandwich norms, OLMo 2),
  times ``config.residual_multiplier`` where the model declares one (Granite);
- the residual structure, with $x$ the block input, $y$ its output and $m$ some call's output:
  *pre-LN* when $y = h + m$ with $h = x + a$ and something reads $h$ (Llama, T5, ViT, Gemma 2),
  *parallel* when $y = x + a + m$ and nothing reads $x + a$ (GPT-J, GPT-NeoX, Phi), *post-LN* when
  a norm reads $x + a$ and the last norm reads $N_1(x + a) + m$ (BERT). A block that fits none is an
  error naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor, nn

from expattn.probes.models.taps import Tap

NORM_CLASS = re.compile(r"norm", re.IGNORECASE)
DISCOVERY_TOKENS = 8
RTOL = 1e-5


def _first(value: object) -> Tensor | None:
    if torch.is_tensor(value):
        return value
    if isinstance(value, tuple | list) and value and torch.is_tensor(value[0]):
        return value[0]
    if hasattr(value, "last_hidden_state"):
        return value.last_hidden_state
    return None


def _input(args: tuple, kwargs: dict) -> Tensor | None:
    return _first(args) if args else kwargs.get("hidden_states")


def same(a: Float[Tensor, "*shape"] | None, b: Float[Tensor, "*other"] | None) -> bool:
    """Equal values to float32 rounding (relative to the larger magnitude), ``b`` read in ``a``'s shape (any
    shapes with the same number of elements; anything else, or None, or an integer tensor: not the same)."""
    if a is None or b is None or a.numel() != b.numel() or not a.is_floating_point() or not b.is_floating_point():
        return False
    b = b.reshape(a.shape)
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-30)
    return bool((a - b).abs().max() <= RTOL * scale)


@dataclass
class Call:
    """One submodule call of the discovery pass: its path, first input and first output tensor."""

    path: str
    module: nn.Module
    start: int
    inp: Tensor | None
    out: Tensor | None = None
    end: int = -1
    heads: Tensor | None = None


def _trace(model: nn.Module, run) -> list[Call]:
    """Every submodule call of ``run()`` in order, with first input and output tensors."""
    calls: list[Call] = []
    handles = []
    names = {id(m): n for n, m in model.named_modules()}
    counter = [0]

    def pre(module, args, kwargs):
        counter[0] += 1
        calls.append(Call(names[id(module)], module, counter[0], _input(args, kwargs)))

    def post(module, _args, _kwargs, out):
        counter[0] += 1
        call = next(c for c in reversed(calls) if c.module is module and c.end < 0)
        first = _first(out)
        call.out, call.end = None if first is None else first.clone(), counter[0]  # blocks may add to it in place
        tap = getattr(module, "_expattn_tap", None)
        if tap is not None:
            call.heads = tap.heads

    for module in model.modules():
        if module is not model:
            handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(module.register_forward_hook(post, with_kwargs=True))
    try:
        with torch.no_grad():
            run()
    finally:
        for h in handles:
            h.remove()
    return calls


def _block_path(path: str) -> str:
    """The shortest prefix of ``path`` ending in a list index (``layers.3``, ``encoder.block.3``)."""
    parts = path.split(".")
    for n, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[: n + 1])
    raise ValueError(f"the attention module {path!r} is not inside a list of blocks")


def _rel(path: str, block: str) -> str:
    return path[len(block) + 1 :] if path != block else ""


@dataclass
class Roles:
    """Where one block's tensors come from: paths relative to the block (None when absent).

    ``o`` output projection; ``a`` module whose output is the attention update (``o`` or a norm of it);
    ``n1`` the module producing the attention input (pre/parallel) or the post-LN norm of $x + a$;
    ``n2`` the norm feeding the MLP (pre/parallel) or the block's last norm (post); ``m`` the module
    whose output is the MLP update; ``scale`` the residual multiplier of both updates.
    """

    structure: str  # "pre", "post" or "parallel"
    tap: Tap
    o: str
    a: str
    scale: float
    n1: str | None
    n2: str | None
    m: str
    norm1: str | None = None  # the role E2 reads as norm1 ("n1", or "a" for a norm after the projection)
    norm2: str | None = None  # "n2", or "m" for a norm after the MLP


def _is_norm(call: Call | None) -> bool:
    return call is not None and bool(NORM_CLASS.search(type(call.module).__name__))


def _roles(block: Call, inner: list[Call], tap_call: Call, config) -> Roles:
    x, y, z = block.inp, block.out, tap_call.heads
    tap = tap_call.module._expattn_tap
    o = next((c for c in inner if c.start > tap_call.start and c.inp is not None and not any(c.module.children())
              and same(c.inp, z)), None)
    if o is None:
        raise ValueError(f"cannot find the output projection of {block.path} (no call reads the head outputs)")
    norms = [c for c in inner if _is_norm(c)]
    a = next((c for c in norms if c.start > o.end and same(c.inp, o.out)), o)
    scale = float(getattr(config, "residual_multiplier", None) or 1.0)
    update = a.out * scale

    def rel(c: Call | None) -> str | None:
        return None if c is None else _rel(c.path, block.path)

    def outermost(total: Tensor, base: Tensor, after: int, before: int) -> Call | None:
        """The outermost call (after ``after``, ending before ``before``) with ``total = base + scale * out``."""
        hits = [c for c in inner if after < c.start and c.end < before and c.out is not None
                and c.out.numel() == base.numel() and same(total, base + c.out.view(base.shape) * scale)]
        return min(hits, key=lambda c: c.start) if hits else None

    h = x + update
    m = outermost(y, h, a.end, block.end)
    if m is not None:
        n1 = next((c for c in inner if c.end < tap_call.start and same(c.inp, x) and same(c.out, tap_call.inp)), None)
        n2 = next((c for c in norms if c.start > a.end and same(c.inp, h)), None)
        if n2 is not None or any(same(c.inp, h) for c in inner if c.start > a.end):
            return Roles("pre", tap, rel(o), rel(a), scale, rel(n1), rel(n2), rel(m))
        n2 = next((c for c in norms if c is not n1 and c.start > tap_call.start and same(c.inp, x)), None)
        if n2 is None:
            n2 = next((c for c in norms if c is not n1 and c.end < tap_call.start and same(c.inp, x)), None)
        return Roles("parallel", tap, rel(o), rel(a), scale, rel(n1), rel(n2), rel(m))
    post = next((c for c in norms if c.start > a.end and same(c.inp, h)), None)
    if post is not None:
        for n2 in (c for c in norms if c.start > post.end and same(c.out, y)):
            m = outermost(n2.inp, post.out, post.end, n2.start)
            if m is not None:
                return Roles("post", tap, rel(o), rel(a), scale, rel(post), rel(n2), rel(m))
    raise ValueError(f"cannot read the residual structure of {block.path} ({type(block.module).__name__}): "
                     "neither x + a + m (pre-LN, parallel) nor N2(N1(x + a) + m) (post-LN)")
