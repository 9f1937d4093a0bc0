"""Model adapters: stable dotted names for every sublayer of a HuggingFace transformer.

Each block ``i`` exposes, through forward hooks, the tensors (all ``(batch, token, dim)``)

- ``layers.i.input``          residual stream entering the block
- ``layers.i.attn.input``     what the query/key/value projections read
- ``layers.i.attn.heads``     concatenated head outputs (input of the output projection)
- ``layers.i.attn.output``    attention branch after the output projection
- ``layers.i.attn.residual``  ``input + attn.output`` (before BERT's post-LayerNorm)
- ``layers.i.norm1.input`` / ``.output``, ``layers.i.norm2.input`` / ``.output``
- ``layers.i.mlp.input`` / ``.output`` (the MLP update), ``layers.i.mlp.skip`` (the stream the
  update is added to), ``layers.i.output`` (block output)

Post-LN (BERT) and pre-LN (GPT-2, Llama) differ in which tensors these names alias: BERT's
``norm1`` normalizes ``attn.residual``; a pre-LN block's ``norm1`` normalizes ``input`` and its
output is ``attn.input``. Families register with ``register_adapter``.

A model that names these points itself (``expattn.nn.hooks``: one set of hook points per depth,
even where one block module serves several depths or is iterated to a fixed point) gives its
adapter those per-depth modules as ``blocks`` and the point that ends a depth as ``finish``
(see ``expattn.probes.models.lm_adapter``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from expattn.probes.models.attention import AttnWeights

# (module path inside a block, "in" for its first input / "out" for its output, names)
HookPoints = tuple[tuple[str, str, tuple[str, ...]], ...]

# What a model reading may offer beside its block tensors; an estimator names those it needs (``Estimator.needs``)
CAPABILITIES = {
    "attention.softmax": "the attention weights are a softmax over the keys",
    "attention.recomputable": "the probe reads the attention kernel's q, k, v and recomputes the heads",
    "logits.uncapped": "the logits are not soft-capped: attention is the gradient of a log-normalizer",
    "logits.bilinear": "q and k are affine in the attention input, so W_q^T W_k is the logits' bilinear form",
    "attention.output.linear": "the attention update is W_o z + b_o (no norm after the projection, no multiplier)",
    "depth.one_step": "each depth is one attention step, not a fixed point of its block",
    "blocks.two_norms": "every block has two normalization sublayers, one before attention and one before the MLP",
}


@dataclass(frozen=True)
class Adapter:
    """How one architecture family maps onto the dotted names.

    Attributes:
        family: short name (``bert``, ``gpt2``, ``llama``).
        model_types: HuggingFace ``config.model_type`` values it serves.
        norm_position: ``post`` (normalize after the residual add) or ``pre`` (normalize the branch input).
        blocks: ``model -> list of block modules``.
        points: hook points of a block (see ``HookPoints``).
        attention: ``(model, block index) -> AttnWeights`` of that block's self-attention.
        norm1: ``(model, block index) -> module`` of the normalization feeding attention (pre-LN) or
            applied after it (post-LN).
        finish: path inside a block of the module whose forward ends the block's depth (``""``: the
            block itself); each module of ``blocks`` is one depth, called once per forward pass.
        lacks: ``model -> {capability: reason}`` for the ``CAPABILITIES`` this reading cannot offer for ``model``.
        capture: the class that hooks the model and hands over each block's tensors (``Capture``'s
            signature); None: ``Capture`` with ``points``.
        reading: what an adapter built for one model instance found in it (``expattn.probes.models.generic``).
        offers: ``model -> names`` of the block tensors it hands over (None: every name of ``points``); the
            runner skips a hypothesis that needs a tensor or a capability not offered (``Estimator.tensors``,
            ``Estimator.needs``).
    """

    family: str
    model_types: tuple[str, ...]
    norm_position: str
    blocks: Callable[[nn.Module], list[nn.Module]]
    points: HookPoints
    attention: Callable[[nn.Module, int], AttnWeights]
    norm1: Callable[[nn.Module, int], nn.Module]
    finish: str = ""
    lacks: Callable[[nn.Module], dict[str, str]] = lambda _model: {}
    capture: Callable | None = None
    reading: object | None = None
    offers: Callable[[nn.Module], frozenset[str]] | None = None

    def offered(self, model: nn.Module) -> frozenset[str]:
        """The names of the block tensors this adapter hands the estimators for ``model``, and the
        ``CAPABILITIES`` it does not lack (ValueError naming a lacked capability that is not one of them)."""
        lacks = self.lacks(model)
        unknown = sorted(set(lacks) - set(CAPABILITIES))
        if unknown:
            raise ValueError(f"{self.family} adapter lacks unknown capability {unknown[0]!r}; the capabilities are "
                             f"{', '.join(CAPABILITIES)}")
        tensors = (self.offers(model) if self.offers is not None
                   else frozenset(name for _, _, names in self.points for name in names))
        return tensors | frozenset(c for c in CAPABILITIES if c not in lacks)


_ADAPTERS: dict[str, Adapter] = {}


def register_adapter(adapter: Adapter) -> Adapter:
    """Add a family; its ``model_types`` become loadable."""
    for model_type in adapter.model_types:
        _ADAPTERS[model_type] = adapter
    return adapter


def supported_model_types() -> list[str]:
    return sorted(_ADAPTERS)


def adapter_for(model_type: str) -> Adapter:
    """The adapter of a ``config.model_type``; ValueError listing the supported ones otherwise."""
    if model_type not in _ADAPTERS:
        raise ValueError(
            f"unsupported architecture {model_type!r}; supported model types: {', '.join(supported_model_types())}"
        )
    return _ADAPTERS[model_type]


def _linear(module: nn.Module) -> tuple[Tensor, Tensor | None]:
    return module.weight.detach(), None if module.bias is None else module.bias.detach()


def _eager(model: nn.Module) -> bool:
    """Whether HuggingFace's eager attention runs (its logits in the model's dtype), not a fused kernel."""
    return getattr(model.config, "_attn_implementation", None) == "eager"


def _bert_attention(model: nn.Module, i: int) -> AttnWeights:
    att = model.encoder.layer[i].attention
    wq, bq = _linear(att.self.query)
    wk, bk = _linear(att.self.key)
    wv, bv = _linear(att.self.value)
    wo, bo = _linear(att.output.dense)
    heads = model.config.num_attention_heads
    head_dim = wq.shape[0] // heads
    return AttnWeights(wq, bq, wk, bk, wv, bv, wo, bo, heads, heads, head_dim**-0.5, causal=False,
                       logits_rounded=_eager(model))


def _gpt2_attention(model: nn.Module, i: int) -> AttnWeights:
    att = model.h[i].attn
    d = model.config.n_embd
    w, b = att.c_attn.weight.detach().T, att.c_attn.bias.detach()  # Conv1D stores (in, out)
    heads = model.config.n_head
    head_dim = d // heads
    scale = head_dim**-0.5 if model.config.scale_attn_weights else 1.0
    if model.config.scale_attn_by_inverse_layer_idx:
        scale /= i + 1
    wo, bo = att.c_proj.weight.detach().T, att.c_proj.bias.detach()
    return AttnWeights(
        w[:d], b[:d], w[d : 2 * d], b[d : 2 * d], w[2 * d :], b[2 * d :], wo, bo, heads, heads, scale, causal=True,
        logits_rounded=_eager(model),
    )


def _llama_attention(model: nn.Module, i: int) -> AttnWeights:
    att = model.layers[i].self_attn
    wq, bq = _linear(att.q_proj)
    wk, bk = _linear(att.k_proj)
    wv, bv = _linear(att.v_proj)
    wo, bo = _linear(att.o_proj)
    heads, kv = model.config.num_attention_heads, model.config.num_key_value_heads
    rotary = model.rotary_emb

    def rope(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        positions = torch.arange(q.shape[-2], device=q.device).unsqueeze(0)
        cos, sin = rotary(q.float(), positions)
        return apply_rotary_pos_emb(q, k, cos.to(q.dtype), sin.to(q.dtype))

    return AttnWeights(wq, bq, wk, bk, wv, bv, wo, bo, heads, kv, att.scaling, causal=True, rope=rope,
                       logits_rounded=_eager(model))


register_adapter(
    Adapter(
        family="bert",
        model_types=("bert", "roberta", "xlm-roberta"),
        norm_position="post",
        blocks=lambda m: list(m.encoder.layer),
        points=(
            ("attention.self.query", "in", ("input", "attn.input")),
            ("attention.output.dense", "in", ("attn.heads",)),
            ("attention.output.dense", "out", ("attn.output",)),
            ("attention.output.LayerNorm", "in", ("attn.residual", "norm1.input")),
            ("attention.output.LayerNorm", "out", ("norm1.output", "mlp.input", "mlp.skip")),
            ("output.dense", "out", ("mlp.output",)),
            ("output.LayerNorm", "in", ("norm2.input",)),
            ("output.LayerNorm", "out", ("norm2.output", "output")),
        ),
        attention=_bert_attention,
        norm1=lambda m, i: m.encoder.layer[i].attention.output.LayerNorm,
    )
)

_PRE_LN = {
    "gpt2": ("ln_1", "attn.c_proj", "ln_2", "mlp"),
    "llama": ("input_layernorm", "self_attn.o_proj", "post_attention_layernorm", "mlp"),
}


def _pre_ln_points(norm1: str, out_proj: str, norm2: str, mlp: str) -> HookPoints:
    return (
        (norm1, "in", ("input", "norm1.input")),
        (norm1, "out", ("norm1.output", "attn.input")),
        (out_proj, "in", ("attn.heads",)),
        (out_proj, "out", ("attn.output",)),
        (norm2, "in", ("attn.residual", "norm2.input", "mlp.skip")),
        (norm2, "out", ("norm2.output", "mlp.input")),
        (mlp, "out", ("mlp.output",)),
        ("", "out", ("output",)),
    )


register_adapter(
    Adapter(
        family="gpt2",
        model_types=("gpt2",),
        norm_position="pre",
        blocks=lambda m: list(m.h),
        points=_pre_ln_points(*_PRE_LN["gpt2"]),
        attention=_gpt2_attention,
        norm1=lambda m, i: m.h[i].ln_1,
    )
)
register_adapter(
    Adapter(
        family="llama",
        model_types=("llama",),
        norm_position="pre",
        blocks=lambda m: list(m.layers),
        points=_pre_ln_points(*_PRE_LN["llama"]),
        attention=_llama_attention,
        norm1=lambda m, i: m.layers[i].input_layernorm,
    )
)


def _first(value: object) -> Tensor:
    return value[0] if isinstance(value, tuple | list) else value


class Capture:
    """Forward hooks that collect one block's named tensors and hand them over when it ends.

    ``on_block(i, tensors)`` is called with ``{"input": ..., "attn.input": ..., ...}`` (names
    without the ``layers.i.`` prefix) right after block ``i`` has produced its output, so only
    one block's activations are alive at a time. Use as a context manager; hooks are removed on exit.

    Args:
        model: the backbone (``BertModel``, ``GPT2Model``, ``LlamaModel``...).
        adapter: its family's adapter.
        on_block: callback ``(block index, dict name -> (batch, token, dim) tensor) -> None``.
    """

    def __init__(self, model: nn.Module, adapter: Adapter, on_block: Callable[[int, dict[str, Tensor]], None]):
        self.model, self.adapter, self.on_block = model, adapter, on_block
        self._handles: list = []
        self._current: dict[str, Tensor] = {}

    def names(self, i: int) -> list[str]:
        """Every dotted name block ``i`` exposes."""
        return sorted(f"layers.{i}.{n}" for _, _, names in self.adapter.points for n in names)

    def _store(self, names: tuple[str, ...], value: Tensor) -> None:
        value = value.detach()  # one object for all names, so estimators can share statistics of it
        for name in names:
            self._current[name] = value

    def __enter__(self) -> Capture:
        for i, block in enumerate(self.adapter.blocks(self.model)):
            self._hook_points(block)  # registered first: the finishing module's own tensor is stored before
            end = block.get_submodule(self.adapter.finish)
            self._handles.append(end.register_forward_hook(lambda _m, _a, _o, i=i: self._finish(i)))
        return self

    def _hook_points(self, block: nn.Module) -> None:
        for path, where, names in self.adapter.points:
            module = block.get_submodule(path)
            if where == "in":
                hook = module.register_forward_pre_hook(lambda _m, args, n=names: self._store(n, args[0]))
            else:
                hook = module.register_forward_hook(lambda _m, _a, out, n=names: self._store(n, _first(out)))
            self._handles.append(hook)

    def _finish(self, i: int) -> None:
        tensors, self._current = self._current, {}
        self.on_block(i, tensors)

    def __exit__(self, *exc: object) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
