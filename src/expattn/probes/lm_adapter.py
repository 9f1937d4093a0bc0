r"""The probe on expattn's own language models (``expattn.nn.lm.LM``, folders of ``expattn train``).

Each depth $i$ of the pre-norm block $x \mapsto h + \mathrm{MLP}(N_2 h)$, $h = x + \mathrm{Attn}(N_1 z)$
(with $z = x$, or the fixed point $z^\star$ of an implicit layer) exposes the probe's names:

- ``input`` = $x$; ``norm1.input`` = $z$; ``norm1.output`` = ``attn.input`` = $N_1 z$;
- ``attn.heads`` (what the output projection reads); ``attn.output`` = $\mathrm{Attn}(N_1 z)$;
- ``attn.residual`` = ``norm2.input`` = ``mlp.skip`` = $h$; ``norm2.output`` = ``mlp.input`` = $N_2 h$;
- ``mlp.output`` = $\mathrm{MLP}(N_2 h)$; ``output`` = the block's output.

One block module may serve several depths (``tied_layers``) and an implicit layer calls it at
every fixed-point iterate. The capture therefore reads the depth from the call itself:
``LM.forward`` names each depth's call ``layers.{i}.`` and, when traced, applies an implicit
layer's block once more at the fixed point under that name; calls without a name (the
solver's iterates) are discarded. ``ProbedLM`` always passes a trace, so every depth is handed
over exactly once per forward pass.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from jaxtyping import Float, Int
from torch import Tensor, nn

from expattn.nn.carriers import carrier_class
from expattn.nn.export import MODEL_TYPE, load_exported
from expattn.nn.lm import LM
from expattn.nn.vocab import CharTokenizer
from expattn.probes.adapters import Adapter, _linear, register_adapter
from expattn.probes.attention import AttnWeights

SOFTMAX_ONLY = ("E4", "E5", "E7", "E8")


class ProbedLM(nn.Module):
    """An ``LM`` called the way the probe calls HuggingFace backbones.

    ``config.hidden_size`` is the width; ``forward(input_ids, attention_mask)`` runs
    ``LM.forward`` with a trace (so that implicit layers are applied once more at their fixed
    point, see the module docstring) and returns the logits ``(batch, token, vocab)``.
    """

    def __init__(self, lm: LM):
        super().__init__()
        if not isinstance(lm, LM):
            raise TypeError(f"lm must be an expattn.nn.lm.LM, got {type(lm).__name__}")
        self.lm = lm
        cfg = lm.cfg
        self.config = SimpleNamespace(
            model_type=MODEL_TYPE, hidden_size=cfg.dim, num_hidden_layers=cfg.layers, n_positions=cfg.context
        )

    def forward(
        self, input_ids: Int[Tensor, "batch token"], attention_mask: Int[Tensor, "batch token"] | None = None
    ) -> Float[Tensor, "batch token vocab"]:
        if attention_mask is not None and not bool(attention_mask.bool().all()):
            raise ValueError("attention_mask must keep every token: expattn LMs take unpadded sequences")
        logits, _ = self.lm(input_ids, trace={})
        return logits


def load_lm(path: Path, config: dict) -> tuple[ProbedLM, CharTokenizer]:
    """A folder written by ``expattn.nn.export.export_model``: the wrapped model and its tokenizer."""
    lm, vocab = load_exported(Path(path), config)
    return ProbedLM(lm).eval(), CharTokenizer(vocab)


def _call_depth(args: tuple, kwargs: dict) -> int | None:
    """Depth ``i`` of a ``Block`` call named ``layers.{i}.``; ``None`` for an unnamed call (a solver iterate)."""
    prefix = args[2] if len(args) > 2 else kwargs.get("prefix", "")
    return int(prefix.split(".")[1]) if prefix.startswith("layers.") else None


def _attention(model: ProbedLM, i: int) -> AttnWeights:
    att = model.lm.layer_blocks()[i].attn
    c = att.config
    wq, bq = _linear(att.q_proj)
    wk, bk = _linear(att.k_proj)
    wv, bv = _linear(att.v_proj)
    wo, bo = _linear(att.out_proj)
    return AttnWeights(wq, bq, wk, bk, wv, bv, wo, bo, c.num_heads, c.kv_heads, c.scale, causal=True)


def _inapplicable(model: ProbedLM) -> dict[str, str]:
    """E4, E5, E7, E8 recompute softmax heads; E7 also stacks one attention step per depth, which an
    implicit layer (a fixed point of its block) is not."""
    cfg = model.lm.cfg
    out = {}
    if cfg.implicit:
        out["E7"] = "implicit layers: each depth is a fixed point of its block, not one attention step"
    if not carrier_class(cfg.carrier).softmax:
        reason = f"the {cfg.carrier!r} carrier is not softmax attention, which this hypothesis recomputes"
        out.update(dict.fromkeys(SOFTMAX_ONLY, reason))
    return out


register_adapter(
    Adapter(
        family="expattn",
        model_types=(MODEL_TYPE,),
        norm_position="pre",
        blocks=lambda m: m.lm.layer_blocks(),
        points=(
            ("", "in", ("input",)),
            ("norm1", "in", ("norm1.input",)),
            ("norm1", "out", ("norm1.output", "attn.input")),
            ("attn.out_proj", "in", ("attn.heads",)),
            ("attn", "out", ("attn.output",)),
            ("norm2", "in", ("attn.residual", "norm2.input", "mlp.skip")),
            ("norm2", "out", ("norm2.output", "mlp.input")),
            ("mlp", "out", ("mlp.output",)),
            ("", "out", ("output",)),
        ),
        attention=_attention,
        norm1=lambda m, i: m.lm.layer_blocks()[i].norm1,
        call_depth=_call_depth,
        inapplicable=_inapplicable,
    )
)
