r"""Any HuggingFace transformer, read from its module tree and one traced forward pass (no table per family).

``read_model(model, model_type, run)`` taps the attention kernels (``expattn.probes.models.taps``), finds
each block's roles (``expattn.probes.models.roles``) and returns an ``Adapter`` whose capture computes the
probe's named tensors (``expattn.probes.models.adapters``) from those roles on every forward pass, and
whose ``AttnWeights`` recompute attention through the model's own attention modules. An attention
module that calls no readable kernel but returns its head outputs (DeBERTa's disentangled
attention) is read passively: its tensors feed E1-E3, E6 and E8, and E4, E5, E7, E9, which recompute
attention, are skipped with the reason.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from expattn.probes.models import taps
from expattn.probes.models.adapters import Adapter
from expattn.probes.models.attention import AttnWeights
from expattn.probes.models.roles import NORM_CLASS, Call, Roles, _block_path, _first, _input, _roles, _trace, same
from expattn.probes.models.taps import WRAPPERS, Replay, Tap, install, tap_all


def forward_kwargs(model: nn.Module) -> dict:
    """``use_cache=False`` where the model's forward takes it (no key/value cache is built)."""
    return {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}


def _linear_maps(replay: Replay, dim: int, device, dtype) -> tuple[Tensor, ...]:
    """``W_q, b_q, W_k, b_k, W_v, b_v`` of the map $x \\mapsto (q, k, v)$ at position 0 (no rotation there), read
    by feeding the basis vectors; and whether that map is affine (False with q/k norms)."""
    t = _input(*replay.origin.call).shape[1]  # the recorded call's length (the discovery pass)
    outs: list[list[Tensor]] = [[], [], []]
    for start in range(0, dim + 1, 256):
        rows = torch.arange(start, min(dim + 1, start + 256))
        x = torch.zeros(len(rows), t, dim, device=device, dtype=dtype)
        hit = rows > 0
        x[hit.nonzero().flatten(), 0, rows[hit] - 1] = 1.0
        for acc, part in zip(outs, replay(x), strict=True):
            acc.append(part[:, :, 0].flatten(1).float())
    maps = []
    for acc in outs:
        full = torch.cat(acc)
        maps += [(full[1:] - full[0]).T.contiguous(), full[0]]
    probe = torch.randn(2, t, dim, generator=torch.Generator().manual_seed(0)).to(device, dtype)
    q = replay(torch.cat([probe, probe.sum(0, keepdim=True)]))[0][:, :, 0].flatten(1).float()
    # q(a + b) - q(0) = (q(a) - q(0)) + (q(b) - q(0)) to the rounding of four outputs in the model's dtype, relative
    # to the outputs, bias included (a large q/k bias leaves the linear parts small beside it, so their own scale
    # would ask for more than the dtype holds); q/k norms miss it by the order of the outputs themselves
    rounding = 8 * torch.finfo(dtype).eps * float(q.abs().max())
    linear = (q[2] - maps[1], (q[0] - maps[1]) + (q[1] - maps[1]))
    affine = same(*linear) or bool((linear[0] - linear[1]).abs().max() <= rounding)
    return (*maps, affine)


def _out_map(module: nn.Module, width: int, device, dtype) -> tuple[Tensor, Tensor | None]:
    """$W_o$ ``(dim, width)`` and $b_o$ of the output projection: an ``nn.Linear``'s own, or read by feeding it the
    basis vectors (GPT-2's ``Conv1D``)."""
    if isinstance(module, nn.Linear):
        return module.weight.detach().float(), None if module.bias is None else module.bias.detach().float()
    eye = torch.cat([torch.zeros(1, width), torch.eye(width)]).to(device, dtype)
    out = module(eye).float()
    return (out[1:] - out[0]).T.contiguous(), out[0]


class GenericCapture:
    """The probe's named tensors of every depth, computed from each block's ``Roles`` (see
    ``expattn.probes.models.adapters.Capture`` for the protocol): hooks on the role modules store their
    tensors; when a block returns, the names are filled in and ``on_block(depth, tensors)`` is called.
    Depths count block calls within one forward pass, so a module shared by several depths works."""

    def __init__(self, model: nn.Module, adapter: Adapter, on_block):
        self.model, self.adapter, self.on_block = model, adapter, on_block
        self.reading: GenericReading = adapter.reading
        self._handles: list = []
        self._current: dict[str, Tensor] = {}
        self._depth = 0

    def _replaying(self) -> bool:
        return any(t.replaying for t in self.reading.taps)

    def _keep(self, key: str, value: object) -> None:
        if not self._replaying():
            value = _first(value).detach()
            # a block may add to a sublayer's output in place (Falcon: mlp_output += attention_output)
            self._current[key] = value.clone() if key in ("o.out", "a.out", "m.out") else value
            if key != "x" and "x" in self._current and self._current[key].dim() == 2:  # a block that flattens tokens
                self._current[key] = self._current[key].view(*self._current["x"].shape[:-1], -1)

    def __enter__(self) -> GenericCapture:
        def reset(*_):
            self._depth = 0

        self._handles.append(self.model.register_forward_pre_hook(reset))
        for block, roles in self.reading.unique_blocks():
            self._handles.append(block.register_forward_pre_hook(
                lambda _m, args, kwargs: self._keep("x", _input(args, kwargs)), with_kwargs=True))
            self._handles.append(block.register_forward_hook(self._finish))
            for role in ("o", "a", "n1", "n2", "m"):
                path = getattr(roles, role)
                if path is None:
                    continue
                module = block.get_submodule(path)
                self._handles.append(module.register_forward_pre_hook(
                    lambda _m, args, kwargs, r=role: self._keep(f"{r}.in", _input(args, kwargs)), with_kwargs=True))
                self._handles.append(module.register_forward_hook(
                    lambda _m, _a, out, r=role: self._keep(f"{r}.out", out)))
        return self

    def _finish(self, _module: nn.Module, _args: tuple, out: object) -> None:
        if self._replaying():
            return
        depth, self._depth = self._depth, self._depth + 1
        got, self._current = self._current, {}
        if depth >= len(self.reading.roles):
            return
        got["y"] = _first(out).detach()
        self.on_block(depth, self.reading.tensors(depth, got))

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


# the block tensors every generic reading hands over (``GenericReading.tensors``); the norms' depend on the block
STREAM = frozenset({"input", "output", "attn.input", "attn.heads", "attn.output", "attn.residual", "mlp.input",
                    "mlp.output", "mlp.skip"})

@dataclass
class GenericReading:
    """What ``read_model`` found: per depth the block module, its ``Roles`` and its ``AttnWeights``."""

    blocks: list[nn.Module]
    roles: list[Roles]
    attention: list[AttnWeights]
    taps: list[Tap]
    affine: bool

    def norm1(self, depth: int) -> nn.Module | None:
        """The module producing the attention input from the block input at ``depth`` (None: none, or an
        identity), which E7 applies in float64 on its pure-attention path."""
        r = self.roles[depth]
        module = None if r.n1 is None else self.blocks[depth].get_submodule(r.n1)
        return None if module is None or isinstance(module, nn.Identity) else module

    @property
    def recomputable(self) -> bool:
        """Whether the attention can be recomputed (its kernel is read), so the acceptance test applies."""
        return not self.roles[0].tap.passive

    def unique_blocks(self) -> list[tuple[nn.Module, Roles]]:
        seen: dict[int, tuple[nn.Module, Roles]] = {}
        for block, roles in zip(self.blocks, self.roles, strict=True):
            seen.setdefault(id(block), (block, roles))
        return list(seen.values())

    def offers(self) -> frozenset[str]:
        """The names ``tensors`` gives at every depth: ``STREAM``, and a norm's input and output where every block
        has that norm (a post-LN block always has both)."""
        return STREAM | {f"{n}.{end}" for n in ("norm1", "norm2") for end in ("input", "output")
                         if all(r.structure == "post" or getattr(r, n) is not None for r in self.roles)}

    def tensors(self, depth: int, got: dict[str, Tensor]) -> dict[str, Tensor]:
        """The named tensors of one block call from its role tensors ``got`` (see module docstring)."""
        r = self.roles[depth]
        x, scale = got["x"], r.scale
        a = got["a.out"] * scale if scale != 1.0 else got["a.out"]
        m = got["m.out"] * scale if scale != 1.0 else got["m.out"]
        xa = _input(*r.tap.call).detach()
        t = {"input": x, "output": got["y"], "attn.input": xa, "attn.heads": r.tap.heads.detach(), "attn.output": a}
        if r.structure == "post":
            h = got["n1.out"]
            t |= {"attn.residual": got["n1.in"], "norm1.input": got["n1.in"], "norm1.output": h,
                  "norm2.input": got["n2.in"], "norm2.output": got["n2.out"]}
            return t | {"mlp.input": h, "mlp.output": m, "mlp.skip": h}
        residual = got["n2.in"] if r.structure == "pre" and r.n2 is not None else x + a
        t["attn.residual"] = residual
        for name, role in (("norm1", r.norm1), ("norm2", r.norm2)):
            if role is not None:
                t[f"{name}.input"], t[f"{name}.output"] = got[f"{role}.in"], got[f"{role}.out"]
        if r.n2 is not None:
            mlp_in = got["n2.out"]
        else:
            mlp_in = residual if r.structure == "pre" else xa
        return t | {"mlp.input": mlp_in, "mlp.output": m, "mlp.skip": residual}

    def lacks(self) -> dict[str, str]:
        """The ``CAPABILITIES`` this model does not offer, each with the reason (see ``read_model``)."""
        out: dict[str, str] = {}
        w, r = self.attention[0], self.roles[0]
        if not self.recomputable:
            out["attention.recomputable"] = (
                f"{type(r.tap.module).__name__} computes attention in its own code, not through a kernel the probe "
                "reads (for DeBERTa: disentangled content-to-position terms whose keys depend on the query position, "
                "not softmax of one bilinear form plus a bias)")
        if w.softcap is not None:
            out["logits.uncapped"] = (f"the logits are soft-capped (c tanh(s q.k / c), c = {w.softcap:g}): attention "
                                      "is not the gradient of the log-normalizer of a bilinear form")
        if not self.affine:
            out["logits.bilinear"] = ("queries and keys are normalized per head (q/k norms): no bilinear form "
                                      "W_q^T W_k to compare")
        if r.a != r.o or r.scale != 1.0:
            out["attention.output.linear"] = (
                "the attention update is not W_o z + b_o (a norm after the output projection or a residual "
                "multiplier), which E7's pure-attention path recomputes")
        if any(r.norm1 is None or r.norm2 is None for r in self.roles):
            out["blocks.two_norms"] = ("the blocks do not have two normalization sublayers (one norm feeds attention "
                                       "and MLP)")
        return out


def _is_norm_path(block: nn.Module, path: str) -> bool:
    return bool(NORM_CLASS.search(type(block.get_submodule(path)).__name__))


def _discover(model: nn.Module, run) -> list[Call]:
    install(model)
    with _autotap(), torch.no_grad():
        run()  # finds the modules that call the kernel and taps them
    if not any(getattr(m, "_expattn_tap", None) is not None for m in model.modules()):
        for module in model.modules():
            name = type(module).__name__
            inner = [type(c).__name__ for c in module.modules() if c is not module]
            if "SelfAttention" in name and not any("Attention" in n for n in inner):
                passive(module)
    return _trace(model, run)


def passive(module: nn.Module) -> Tap:
    """A tap on an attention module whose kernel is not read: its call and first output (the head outputs)."""
    tap = Tap(module)
    tap.passive = True

    def keep(_m, _a, out):
        if not tap.replaying:
            tap.heads = _first(out)

    module.register_forward_hook(keep)
    return tap


@contextmanager
def _autotap() -> Iterator[None]:
    """Inside: any module calling the ``expattn`` kernel gets a tap."""
    taps.AUTOTAP = True
    try:
        yield
    finally:
        taps.AUTOTAP = False


def read_model(model: nn.Module, model_type: str, run) -> Adapter:
    """An ``Adapter`` for ``model`` read from its module tree; ``run()`` does one forward pass on a few tokens.

    Raises:
        ValueError: no attention kernel the probe can read, or a block whose roles cannot be found (the
            message names the block).
    """
    with torch.no_grad():
        return _read(model, model_type, run)


def _read(model: nn.Module, model_type: str, run) -> Adapter:
    calls = _discover(model, run)
    tap_calls = [c for c in calls if getattr(c.module, "_expattn_tap", None) is not None]
    if not tap_calls:
        raise ValueError(f"cannot read the attention of {model_type!r}: no module calls a HuggingFace attention "
                         f"kernel or is one the probe knows ({', '.join(WRAPPERS)})")
    blocks, roles = [], []
    for tc in tap_calls:
        path = _block_path(tc.path)
        block = next(c for c in calls if c.path == path and c.start < tc.start and c.end > tc.end)
        inner = [c for c in calls if c.path.startswith(path + ".") and block.start < c.start and c.end < block.end]
        r = _roles(block, inner, tc, model.config)
        r.norm1 = "n1" if r.n1 is not None else "a" if r.a != r.o else None
        r.norm2 = "n2" if r.n2 is not None else "m" if _is_norm_path(block.module, r.m) else None
        roles.append(r)
        blocks.append(block.module)
    tapped = tap_all([tc.module for tc in tap_calls])
    weights, affine = [], True
    param = next(model.parameters())
    for block, r in zip(blocks, roles, strict=True):
        if r.tap.passive:
            weights.append(_unread(block.get_submodule(r.o), r.tap.heads.shape[-1], model.config))
            continue
        replay = Replay(r.tap)
        wq, bq, wk, bk, wv, bv, linear = _linear_maps(replay, _input(*r.tap.call).shape[-1], param.device, param.dtype)
        affine = affine and linear
        heads, kv_heads = _head_counts(replay, wq)
        o = block.get_submodule(r.o)
        wo, bo = _out_map(o, wq.shape[0] // heads * heads, param.device, param.dtype)
        logits = r.tap.logits
        weights.append(AttnWeights(
            wq, bq, wk, bk, wv, bv, wo, bo, heads, kv_heads, logits.scale, causal=_is_causal(r.tap),
            rope=_applied if _rotary(r.tap) else None, qkv=replay, softcap=logits.softcap,
            bias=lambda tap=r.tap: tap.logits.bias, logits_rounded=logits.rounded,
        ))
    reading = GenericReading(blocks, roles, weights, tapped, affine)
    causal = _is_causal(roles[0].tap)
    return Adapter(
        family="decoder" if causal else "encoder",
        model_types=(model_type,),
        norm_position="post" if roles[0].structure == "post" else "pre",
        blocks=lambda _m: list(blocks),
        points=(),
        attention=lambda _m, i: weights[i],
        norm1=lambda _m, i: reading.norm1(i),
        lacks=lambda _m: reading.lacks(),
        offers=lambda _m: reading.offers(),
        capture=GenericCapture,
        reading=reading,
    )


def _applied(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    """Marks rotary embeddings as present: the attention module applies them itself (``qkv``), so this is never
    called on that path."""
    return q, k


def _rotary(tap: Tap) -> bool:
    """Whether the attention module rotates $q, k$: it takes ``position_embeddings`` or has rotary settings."""
    kwargs = tap.call[1]
    names = ("rotary_emb", "rotary_dim", "rotary_ndims", "rotary_fn")
    return kwargs.get("position_embeddings") is not None or any(hasattr(tap.module, n) for n in names)


def _unread(o: nn.Module, width: int, config) -> AttnWeights:
    """Weights of an attention whose kernel is not read: the output projection only (E8 reads it); the query
    and key maps are zero placeholders that no applicable hypothesis uses."""
    param = next(o.parameters())
    heads = int(config.num_attention_heads)
    wo, bo = _out_map(o, width, param.device, param.dtype)
    zero = torch.zeros(width, wo.shape[0], device=param.device)
    return AttnWeights(zero, None, zero, None, zero, None, wo, bo, heads, heads, (width // heads) ** -0.5, False)


def _head_counts(replay: Replay, wq: Tensor) -> tuple[int, int]:
    param = next(replay.origin.module.parameters())
    x = torch.zeros(1, _input(*replay.origin.call).shape[1], wq.shape[1], dtype=param.dtype, device=param.device)
    q, k, _ = replay(x)
    return q.shape[1], k.shape[1]


def _is_causal(tap: Tap) -> bool:
    """Causal when SDPA masks the future itself or the bias forbids the first query the last key."""
    logits = tap.logits
    if logits is None:
        return False
    if logits.causal:
        return True
    return logits.bias is not None and bool(logits.bias[..., 0, -1].max() < -1e4)
