"""ExpFamAttention(empirical) reproduces torch's and transformers' attention layers exactly.

Same weights, same inputs, float64: the only differences are round-off of a few matmuls and a
softmax on O(1) numbers (~1e-15), so 1e-12 is tight yet safe. Models are built from small random
configs; nothing is downloaded.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from tiny_models import randomize, tiny_config
from torch import nn

from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig, rotate_half_rope

F64 = torch.float64
TOL = {"rtol": 0.0, "atol": 1e-12}


def copy_linear(dst: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    with torch.no_grad():
        dst.weight.copy_(weight)
        if bias is not None:
            dst.bias.copy_(bias)


def test_matches_torch_multihead_attention_self(gen):
    mha = nn.MultiheadAttention(16, 4, batch_first=True, dtype=F64)
    randomize(mha, gen)
    ours = ExpFamAttention(ExpFamAttentionConfig(embed_dim=16, num_heads=4)).double()
    wq, wk, wv = mha.in_proj_weight.chunk(3)
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    for lin, w, b in ((ours.q_proj, wq, bq), (ours.k_proj, wk, bk), (ours.v_proj, wv, bv),
                      (ours.out_proj, mha.out_proj.weight, mha.out_proj.bias)):
        copy_linear(lin, w, b)
    x = torch.randn(3, 6, 16, generator=gen, dtype=F64)
    pad = torch.ones(3, 6, dtype=torch.bool)
    pad[2, 4:] = False
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    ref, ref_w = mha(x, x, x, key_padding_mask=~pad, attn_mask=~causal, need_weights=True,
                     average_attn_weights=False)  # torch: True = masked out
    mha.eval()
    out = ours(x, key_padding_mask=pad, is_causal=True, need_weights=True)
    torch.testing.assert_close(out, ref, **TOL)
    torch.testing.assert_close(ours.last_weights, ref_w, **TOL)
    bias = torch.randn(6, 6, generator=gen, dtype=F64)
    torch.testing.assert_close(ours(x, attn_mask=bias), mha(x, x, x, attn_mask=bias, need_weights=False)[0], **TOL)


def test_matches_torch_multihead_attention_cross(gen):
    mha = nn.MultiheadAttention(12, 3, kdim=5, vdim=7, batch_first=True, dtype=F64)
    randomize(mha, gen)
    ours = ExpFamAttention(ExpFamAttentionConfig(embed_dim=12, num_heads=3, kdim=5, vdim=7)).double()
    bq, bk, bv = mha.in_proj_bias.chunk(3)
    copy_linear(ours.q_proj, mha.q_proj_weight, bq)
    copy_linear(ours.k_proj, mha.k_proj_weight, bk)
    copy_linear(ours.v_proj, mha.v_proj_weight, bv)
    copy_linear(ours.out_proj, mha.out_proj.weight, mha.out_proj.bias)
    q = torch.randn(2, 4, 12, generator=gen, dtype=F64)
    k = torch.randn(2, 9, 5, generator=gen, dtype=F64)
    v = torch.randn(2, 9, 7, generator=gen, dtype=F64)
    pad = torch.rand(2, 9, generator=gen) > 0.3
    pad[:, 0] = True
    ref, _ = mha(q, k, v, key_padding_mask=~pad, need_weights=False)
    torch.testing.assert_close(ours(q, k, v, key_padding_mask=pad), ref, **TOL)


@pytest.mark.slow  # importing transformers takes several seconds
def test_matches_transformers_bert_self_attention(gen):
    bert = pytest.importorskip("transformers.models.bert.modeling_bert")
    config = tiny_config("bert", hidden_size=24, attention_probs_dropout_prob=0.0)
    config._attn_implementation = "eager"
    layer = bert.BertSelfAttention(config).double().eval()
    randomize(layer, gen)
    ours = ExpFamAttention(ExpFamAttentionConfig(embed_dim=24, num_heads=4)).double()
    for lin, src in ((ours.q_proj, layer.query), (ours.k_proj, layer.key), (ours.v_proj, layer.value)):
        copy_linear(lin, src.weight, src.bias)
    copy_linear(ours.out_proj, torch.eye(24, dtype=F64), torch.zeros(24, dtype=F64))  # BERT's dense is elsewhere
    x = torch.randn(2, 7, 24, generator=gen, dtype=F64)
    pad = torch.ones(2, 7, dtype=torch.bool)
    pad[1, 5:] = False
    extended = torch.zeros(2, 1, 1, 7, dtype=F64).masked_fill(~pad[:, None, None], torch.finfo(F64).min)
    ref, ref_w = layer(x, attention_mask=extended)
    torch.testing.assert_close(ours(x, key_padding_mask=pad, need_weights=True), ref, **TOL)
    torch.testing.assert_close(ours.last_weights, ref_w, **TOL)


@pytest.mark.slow
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_matches_transformers_llama_attention_rope_gqa_causal(gen, implementation):
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    config = tiny_config("llama", hidden_size=48, num_attention_heads=6, head_dim=8, max_position_embeddings=64,
                         attention_bias=False)
    config._attn_implementation = implementation
    layer = llama.LlamaAttention(config, layer_idx=0).double().eval()
    randomize(layer, gen)
    rope = llama.LlamaRotaryEmbedding(config)
    ours = ExpFamAttention(ExpFamAttentionConfig(embed_dim=48, num_heads=6, num_kv_heads=2, head_dim=8,
                                                 bias=False, causal=True)).double()
    for lin, src in ((ours.q_proj, layer.q_proj), (ours.k_proj, layer.k_proj), (ours.v_proj, layer.v_proj),
                     (ours.out_proj, layer.o_proj)):
        copy_linear(lin, src.weight, None)
    x = torch.randn(2, 9, 48, generator=gen, dtype=F64)
    positions = torch.arange(9)[None].expand(2, 9)
    cos, sin = (t.double() for t in rope(x, positions))
    causal = torch.zeros(9, 9, dtype=F64).masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), -torch.inf)
    ref, ref_w = layer(x, position_embeddings=(cos, sin), attention_mask=causal[None, None].expand(2, 1, 9, 9))
    out = ours(x, rotary=partial(rotate_half_rope, cos=cos, sin=sin), need_weights=True)
    if implementation == "sdpa":
        torch.testing.assert_close(out, ref, **TOL)
        torch.testing.assert_close(ours(x, rotary=partial(rotate_half_rope, cos=cos, sin=sin)), ref, **TOL)
    else:
        # transformers' eager Llama softmax runs in float32 then casts back: float32 round-off (~1e-7
        # relative on weights <= 1), propagated through O(1) values and o_proj.
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-6)
        torch.testing.assert_close(ours.last_weights, ref_w, rtol=0, atol=1e-6)
