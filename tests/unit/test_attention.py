"""ExpFamAttention and its functional form against an explicit per-head computation (A3, B1)."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import randomize

from expattn.nn.attention import (
    ExpFamAttention,
    ExpFamAttentionConfig,
    exp_fam_attention,
    rotate_half_rope,
)
from expattn.nn.carriers import make_carrier
from expattn.nn.masks import attention_mask

F64 = torch.float64


def module(gen, **kw) -> ExpFamAttention:
    return randomize(ExpFamAttention(ExpFamAttentionConfig(**kw)).double(), gen)


def explicit(m: ExpFamAttention, x, y, keep):
    """Loop over batch and heads, explicit exp/sum softmax; keep: bool (B, Q, K)."""
    c = m.config
    q, k, v = m.q_proj(x), m.k_proj(y), m.v_proj(y)
    group = c.num_heads // c.kv_heads
    out = torch.zeros(x.shape[0], x.shape[1], c.num_heads * c.dim, dtype=F64)
    for b in range(x.shape[0]):
        for h in range(c.num_heads):
            g = h // group
            qh = q[b, :, h * c.dim : (h + 1) * c.dim]
            kh, vh = k[b, :, g * c.dim : (g + 1) * c.dim], v[b, :, g * c.dim : (g + 1) * c.dim]
            e = torch.exp(c.scale * qh @ kh.T) * keep[b]
            out[b, :, h * c.dim : (h + 1) * c.dim] = (e / e.sum(-1, keepdim=True)) @ vh
    return m.out_proj(out)


def test_self_attention_gqa_causal_padding_matches_explicit(gen):
    m = module(gen, embed_dim=12, num_heads=6, num_kv_heads=2, causal=True)
    x = torch.randn(3, 7, 12, generator=gen, dtype=F64)
    pad = torch.ones(3, 7, dtype=torch.bool)
    pad[1, 5:] = False
    keep = torch.ones(7, 7, dtype=torch.bool).tril() & pad[:, None, :]
    # float64 round-off through three matmuls of O(1) numbers: 1e-12 is far from any real error.
    torch.testing.assert_close(m(x, key_padding_mask=pad), explicit(m, x, x, keep), rtol=0, atol=1e-12)
    torch.testing.assert_close(m(x, key_padding_mask=pad, need_weights=True), explicit(m, x, x, keep), rtol=0,
                               atol=1e-12)


def test_cross_attention_with_float_mask_and_beta(gen):
    m = module(gen, embed_dim=8, num_heads=2, kdim=5, vdim=3, beta=0.3, head_dim=6)
    x = torch.randn(2, 4, 8, generator=gen, dtype=F64)
    y = torch.randn(2, 6, 5, generator=gen, dtype=F64)
    z = torch.randn(2, 6, 3, generator=gen, dtype=F64)
    keep = torch.rand(2, 4, 6, generator=gen) > 0.3
    keep[..., 0] = True
    bias = torch.zeros(2, 4, 6, dtype=F64).masked_fill(~keep, -torch.inf)
    out = m(x, y, z, attn_mask=bias)
    c = m.config
    q, k, v = m.q_proj(x).unflatten(-1, (2, 6)), m.k_proj(y).unflatten(-1, (2, 6)), m.v_proj(z).unflatten(-1, (2, 6))
    e = torch.exp(0.3 * torch.einsum("bqhd,bkhd->bhqk", q, k)) * keep[:, None]
    ref = torch.einsum("bhqk,bkhd->bqhd", e / e.sum(-1, keepdim=True), v).flatten(-2)
    assert c.dim == 6
    torch.testing.assert_close(out, m.out_proj(ref), rtol=0, atol=1e-12)  # float64 round-off


def test_weights_and_log_normalizer_exposed_by_attribute_and_hook(gen):
    m = module(gen, embed_dim=8, num_heads=2)
    x = torch.randn(2, 5, 8, generator=gen, dtype=F64)
    m(x)
    assert m.last_weights is None and m.last_log_normalizer is None
    seen = {}
    handle = m.hook_log_normalizer.register_forward_hook(lambda mod, inp, out: seen.setdefault("g", out))
    m(x)
    handle.remove()
    assert "hook_weights" in dict(m.named_modules()) and "hook_log_normalizer" in dict(m.named_modules())
    q = m.q_proj(x).unflatten(-1, (2, 4)).transpose(1, 2)
    k = m.k_proj(x).unflatten(-1, (2, 4)).transpose(1, 2)
    logits = q @ k.mT / 2.0  # scale 1/sqrt(4)
    torch.testing.assert_close(seen["g"], torch.logsumexp(logits, -1), rtol=0, atol=1e-12)
    torch.testing.assert_close(m.last_weights, torch.softmax(logits, -1), rtol=0, atol=1e-12)
    m(x)  # hook removed: the next plain call drops the kept statistics again
    assert m.last_weights is None and m.last_log_normalizer is None


def test_residual_step_is_gradient_ascent_on_log_normalizer(gen):
    """B1: with identity projections, x + s * attention(x) = eta + s * grad G(eta), carrier = cloud."""
    m = ExpFamAttention(ExpFamAttentionConfig(embed_dim=4, num_heads=1, bias=False, beta=1.0)).double()
    with torch.no_grad():
        for lin in (m.q_proj, m.k_proj, m.v_proj, m.out_proj):
            lin.weight.copy_(torch.eye(4, dtype=F64))
    x = torch.randn(2, 6, 4, generator=gen, dtype=F64)
    eta = x.clone().requires_grad_(True)
    g = torch.logsumexp(eta @ x.mT, -1)  # the carrier x is held fixed while differentiating
    (grad,) = torch.autograd.grad(g.sum(), eta)
    torch.testing.assert_close(m.residual_step(x, 0.7), x + 0.7 * grad, rtol=0, atol=1e-12)


def test_fully_masked_row_gives_out_bias_and_minus_inf(gen):
    m = module(gen, embed_dim=6, num_heads=3)
    x = torch.randn(2, 4, 6, generator=gen, dtype=F64, requires_grad=True)
    pad = torch.ones(2, 4, dtype=torch.bool)
    pad[1] = False
    y = m(x, key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(y[1], m.out_proj.bias.expand(4, 6), rtol=0, atol=0)  # zero attention output
    assert torch.isneginf(m.last_log_normalizer[1]).all() and (m.last_weights[1] == 0).all()
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


def test_causal_mask_aligns_last_query_with_last_key():
    mask = attention_mask(1, 1, 2, 4, causal=True)
    assert mask[0, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    pad = torch.tensor([[True, False, True, True]])
    bias = attention_mask(1, 1, 2, 4, key_padding_mask=pad, attn_mask=torch.zeros(2, 4), causal=True)
    assert torch.isneginf(bias[0, 0]).tolist() == [[False, True, False, True], [False, True, False, False]]


def test_rotary_embedding_depends_on_relative_position_only(gen):
    d, t = 8, 6
    inv = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=F64) / d)
    angles = torch.arange(t, dtype=F64)[:, None] * inv
    emb = torch.cat((angles, angles), -1)[None]  # (1, T, D)
    rope = partial(rotate_half_rope, cos=emb.cos(), sin=emb.sin())
    a = torch.randn(d, generator=gen, dtype=F64)
    b = torch.randn(d, generator=gen, dtype=F64)
    q, k = rope(a.expand(1, 1, t, d), b.expand(1, 1, t, d))
    scores = q[0, 0] @ k[0, 0].T  # scores[m, n] = f(m - n) for RoPE
    torch.testing.assert_close(scores[3, 1], scores[5, 3], rtol=0, atol=1e-12)
    torch.testing.assert_close(scores[2, 4], scores[0, 2], rtol=0, atol=1e-12)
    torch.testing.assert_close(q.norm(dim=-1), a.norm().expand(1, 1, t), rtol=0, atol=1e-12)  # rotations


@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
def test_module_gradcheck_float64(gen, carrier):
    m = module(gen, embed_dim=4, num_heads=2, num_kv_heads=1, carrier=carrier, causal=True)
    x = torch.randn(1, 3, 4, generator=gen, dtype=F64, requires_grad=True)
    pad = torch.tensor([[True, True, False]])
    assert torch.autograd.gradcheck(lambda x: m(x, key_padding_mask=pad, need_weights=True), [x])
    assert torch.autograd.gradcheck(lambda x: m(x, key_padding_mask=pad), [x])


def test_functional_form_builds_named_carrier(gen):
    q = torch.randn(2, 2, 3, 4, generator=gen, dtype=F64)
    k = torch.randn(2, 1, 5, 4, generator=gen, dtype=F64)
    out = exp_fam_attention(q, k, k, carrier="gaussian_mixture", need_weights=True)
    assert out.output.dtype == F64 and out.weights.shape == (2, 2, 3, 5) and out.log_normalizer.shape == (2, 2, 3)


def test_bad_input_raises_naming_the_argument(gen):
    with pytest.raises(ValueError, match="num_heads=5 must divide embed_dim=12"):
        ExpFamAttentionConfig(embed_dim=12, num_heads=5)
    with pytest.raises(ValueError, match="num_kv_heads"):
        ExpFamAttentionConfig(embed_dim=12, num_heads=4, num_kv_heads=3)
    with pytest.raises(ValueError, match="beta"):
        ExpFamAttentionConfig(embed_dim=12, num_heads=4, beta=0.0)
    with pytest.raises(ValueError, match="carrier must be one of"):
        ExpFamAttention(ExpFamAttentionConfig(embed_dim=12, num_heads=4, carrier="nope"))
    m = module(gen, embed_dim=8, num_heads=2)
    x = torch.randn(2, 5, 8, generator=gen, dtype=F64)
    with pytest.raises(ValueError, match="query must have shape"):
        m(x[..., :7])
    with pytest.raises(ValueError, match="key"):
        m(x, x[:1])
    with pytest.raises(TypeError, match="key_padding_mask must be bool"):
        m(x, key_padding_mask=torch.ones(2, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        m(x, key_padding_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="attn_mask must be bool"):
        m(x, attn_mask=torch.ones(5, 5, dtype=torch.int32))
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        m(x, attn_mask=torch.ones(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="attn_mask must hold finite values or -inf"):
        m(x, attn_mask=torch.full((5, 5), torch.nan, dtype=F64))
    with pytest.raises(TypeError, match="query must be a floating"):
        m(torch.ones(2, 5, 8, dtype=torch.int64))
    q = torch.randn(1, 3, 2, 4, dtype=F64)
    with pytest.raises(ValueError, match="kv heads must divide 3"):
        exp_fam_attention(q, q[:, :2], q[:, :2])
    with pytest.raises(ValueError, match="scale"):
        exp_fam_attention(q, q, q, scale=-1.0)
    with pytest.raises(ValueError, match="k has head size"):
        exp_fam_attention(q, q[..., :3], q)
    with pytest.raises(ValueError, match="step_size"):
        m.residual_step(x, float("nan"))


def test_verify_check_b1_passes():
    from expattn.catalogue.registry import RunContext
    from expattn.checks.b1_d1 import check_b1

    record = check_b1(RunContext(seed=5, quick=True))
    assert record.verdict == "pass" and record.metrics["max_error"] <= record.metrics["tolerance"]


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3), heads=st.sampled_from([(1, 1), (2, 1), (4, 2)]), queries=st.integers(1, 5),
    keys=st.integers(1, 6), causal=st.booleans(), seed=st.integers(0, 2**31 - 1),
    carrier=st.sampled_from(["empirical", "gaussian_mixture", "mixture_lower_bound"]),
)
def test_fused_and_explicit_paths_agree_on_random_masks(batch, heads, queries, keys, causal, seed, carrier):
    """Fuzz: any mask (including fully masked rows) gives finite outputs, equal on both paths."""
    gen = torch.Generator().manual_seed(seed)
    h, hkv = heads
    q = torch.randn(batch, h, queries, 3, generator=gen, dtype=F64)
    k = torch.randn(batch, hkv, keys, 3, generator=gen, dtype=F64)
    v = torch.randn(batch, hkv, keys, 3, generator=gen, dtype=F64)
    pad = torch.rand(batch, keys, generator=gen) > 0.3
    module = make_carrier(carrier, num_heads=h, head_dim=3).double()
    fast = exp_fam_attention(q, k, v, carrier=module, key_padding_mask=pad, causal=causal)
    full = exp_fam_attention(q, k, v, carrier=module, key_padding_mask=pad, causal=causal, need_weights=True)
    assert torch.isfinite(fast.output).all()
    torch.testing.assert_close(fast.output, full.output, rtol=0, atol=1e-12)  # float64 round-off
    keep = attention_mask(batch, h, queries, keys, key_padding_mask=pad, causal=causal)
    dead = ~keep.expand(batch, h, queries, keys).any(-1)
    assert torch.equal(torch.isneginf(full.log_normalizer), dead)
    assert (full.output[dead] == 0).all()


@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_plain_causal_fast_path_equals_the_explicit_triangle_mask(gen, carrier, need_weights):
    """causal=True alone takes SDPA's is_causal kernel on fused carriers; values and gradients
    must equal those of the same lower-triangle passed as an explicit mask (float64 round-off)."""
    q = torch.randn(2, 4, 7, 3, generator=gen, dtype=F64, requires_grad=True)
    k = torch.randn(2, 2, 7, 3, generator=gen, dtype=F64, requires_grad=True)
    v = torch.randn(2, 2, 7, 3, generator=gen, dtype=F64)
    module = make_carrier(carrier, num_heads=4, head_dim=3).double()
    tril = torch.ones(7, 7, dtype=torch.bool).tril()
    fast = exp_fam_attention(q, k, v, carrier=module, causal=True, need_weights=need_weights)
    ref = exp_fam_attention(q, k, v, carrier=module, attn_mask=tril, need_weights=need_weights)
    torch.testing.assert_close(fast.output, ref.output, rtol=0, atol=1e-12)
    if need_weights:
        torch.testing.assert_close(fast.weights, ref.weights, rtol=0, atol=1e-12)
        torch.testing.assert_close(fast.log_normalizer, ref.log_normalizer, rtol=0, atol=1e-12)
    g_fast = torch.autograd.grad(fast.output.square().sum(), (q, k), allow_unused=True)
    g_ref = torch.autograd.grad(ref.output.square().sum(), (q, k), allow_unused=True)
    for a, b in zip(g_fast, g_ref, strict=True):  # None: the lower bound's weights ignore the keys
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=0, atol=1e-11)


def test_packed_projections_are_views_and_both_paths_agree(gen):
    """Equal widths: one parameter [W_q; W_k; W_v] (nn.MultiheadAttention's layout), q/k/v_proj are views of its
    rows; self-attention's single product equals the three separate products of the cross-attention path
    (float64 round-off)."""
    m = module(gen, embed_dim=12, num_heads=6, num_kv_heads=2)
    names = {n for n, _ in m.named_parameters()}
    assert {"in_proj_weight", "in_proj_bias"} <= names and not any("q_proj" in n for n in names)
    assert m.in_proj_weight.shape == (12 + 2 * 4, 12)
    with torch.no_grad():
        m.k_proj.weight.copy_(torch.full((4, 12), 0.5, dtype=F64))
    assert (m.in_proj_weight[12:16] == 0.5).all() and not (m.in_proj_weight[:12] == 0.5).all()
    x = torch.randn(2, 5, 12, generator=gen, dtype=F64)
    torch.testing.assert_close(m(x), m(x, x.clone(), x.clone()), rtol=0, atol=1e-12)
    cross = ExpFamAttention(ExpFamAttentionConfig(embed_dim=12, num_heads=6, kdim=7))
    assert cross.in_proj_weight is None and isinstance(cross.q_proj, torch.nn.Linear)
