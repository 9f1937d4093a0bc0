r"""The probe on expattn's own language models (``expattn.nn.lm.LM``, folders of ``expattn train``).

The LM exposes every depth's tensors at named hook points in the probe's vocabulary
(``expattn.nn.hooks``: ``blocks.{i}.input``, ``norm1.input``, ``norm1.output`` = ``attn.input``,
``attn.heads``, ``attn.output``, ``attn.residual`` = ``norm2.input``, ``norm2.output`` =
``mlp.input``, ``mlp.output``, ``output``), one set per depth even when one block module serves
every depth (``tied_layers``). The capture hooks those points, so each depth is handed over
exactly once per forward pass; an implicit layer passes its tensors through them once, at the
fixed point, not at the solver's iterates (``LM.forward``). ``mlp.skip`` is ``attn.residual``.
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
from expattn.probes.models.adapters import Adapter, _linear, register_adapter
from expattn.probes.models.attention import AttnWeights


class ProbedLM(nn.Module):
    """An ``LM`` called the way the probe calls HuggingFace backbones.

    ``config.hidden_size`` is the width; ``forward(input_ids, attention_mask)`` runs
    ``LM.forward`` and returns the logits ``(batch, token, vocab)``.
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
        logits, _ = self.lm(input_ids)
        return logits


def load_lm(path: Path, config: dict) -> tuple[ProbedLM, CharTokenizer]:
    """A folder written by ``expattn.nn.export.export_model``: the wrapped model and its tokenizer."""
    lm, vocab = load_exported(Path(path), config)
    return ProbedLM(lm).eval(), CharTokenizer(vocab)


def _attention(model: ProbedLM, i: int) -> AttnWeights:
    att = model.lm.layer_blocks()[i].attn
    c = att.config
    wq, bq = _linear(att.q_proj)
    wk, bk = _linear(att.k_proj)
    wv, bv = _linear(att.v_proj)
    wo, bo = _linear(att.out_proj)
    return AttnWeights(wq, bq, wk, bk, wv, bv, wo, bo, c.num_heads, c.kv_heads, c.scale, causal=True)


def _lacks(model: ProbedLM) -> dict[str, str]:
    """A carrier that is not softmax offers no softmax heads to recompute; an implicit layer (a fixed point of its
    block) is not one attention step per depth."""
    cfg = model.lm.cfg
    out = {}
    if cfg.implicit:
        out["depth.one_step"] = "implicit layers: each depth is a fixed point of its block, not one attention step"
    if not carrier_class(cfg.carrier).softmax:
        out["attention.softmax"] = (f"the {cfg.carrier!r} carrier is not softmax attention, which this hypothesis "
                                    "recomputes")
    return out


register_adapter(
    Adapter(
        family="expattn",
        model_types=(MODEL_TYPE,),
        norm_position="pre",
        blocks=lambda m: list(m.lm.hooks),  # the hook points of each depth (expattn.nn.hooks.BlockHooks)
        points=(  # one hook per tensor, stored under each name that aliases it
            ("input", "out", ("input",)),
            ("norm1.input", "out", ("norm1.input",)),
            ("norm1.output", "out", ("norm1.output", "attn.input")),
            ("attn.heads", "out", ("attn.heads",)),
            ("attn.output", "out", ("attn.output",)),
            ("attn.residual", "out", ("attn.residual", "norm2.input", "mlp.skip")),
            ("norm2.output", "out", ("norm2.output", "mlp.input")),
            ("mlp.output", "out", ("mlp.output",)),
            ("output", "out", ("output",)),
        ),
        attention=_attention,
        norm1=lambda m, i: m.lm.layer_blocks()[i].norm1,
        finish="output",
        lacks=_lacks,
    )
)
