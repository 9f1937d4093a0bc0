"""E8's per-head coherence: each head's margin against an explicit computation over every token and head pair,
its mean over heads equal to the layer's margin, and a synthetic layer whose head 0 is the sum of the others."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from expattn.probes.hypotheses.base import Batch, ProbeContext
from expattn.probes.hypotheses.e8_heads import E8Heads, head_cosines, head_gram
from expattn.probes.models.attention import AttnWeights, head_updates
from expattn.probes.statistics.stats import poisson_weights


def weights(wo: torch.Tensor, heads: int) -> AttnWeights:
    """Attention weights with output projection ``wo`` ``(D, heads * head_dim)`` (E8 reads nothing else)."""
    zeros = torch.zeros(wo.shape[1], wo.shape[0], dtype=wo.dtype)
    return AttnWeights(zeros, None, zeros, None, zeros, None, wo, None, heads, heads, 1.0, False)


def test_head_margins_match_explicit_cosines(gen):
    heads, dh, d, b, t = 4, 5, 9, 3, 7
    wo = torch.randn(d, heads * dh, generator=gen, dtype=torch.float64)
    w = weights(wo, heads)
    z = torch.randn(b, t, heads * dh, generator=gen, dtype=torch.float64)
    cos = head_cosines(z, head_gram(w), heads, z @ wo.T)
    u = head_updates(z, w)  # (B, T, H, D)
    un = u / u.norm(dim=-1, keepdim=True)
    off = ~torch.eye(heads, dtype=torch.bool)
    same = torch.einsum("bthd,btkd->bthk", un, un).masked_fill(~off, 0).sum(-1).mean(1) / (heads - 1)  # (B, H)
    pairs = torch.einsum("bthd,bskd->btshk", un, un).masked_fill(~off, 0).sum(-1)  # (B, T, S, H): h' != h
    null = pairs[:, ~torch.eye(t, dtype=torch.bool)].mean(1) / (heads - 1)  # s != t
    assert cos.head.shape == (b, heads)
    np.testing.assert_allclose(cos.head.numpy(), (same - null).numpy(), rtol=1e-10, atol=1e-12)
    # over heads, the per-head margins average to the layer's (float64 throughout: rounding only)
    np.testing.assert_allclose(cos.head.mean(1).numpy(), (cos.same - cos.null).numpy(), rtol=1e-12, atol=1e-14)


def synthetic_layer(gen, heads: int, d: int, b: int, t: int) -> tuple[AttnWeights, torch.Tensor, torch.Tensor]:
    """Updates $u_h = v_h$ with $v_1, \\ldots, v_{H-1}$ independent standard normal in $D$ dimensions and
    $v_0 = \\sum_{h \\ge 1} v_h$, realised through a random orthogonal $W_o[:, h] = Q_h$ and $z_h = Q_h^\\top v_h$.
    Returns the weights, ``z`` ``(B, T, H*D)`` and the attention output ``(B, T, D)`` (no bias), float32."""
    q = torch.linalg.qr(torch.randn(heads, d, d, generator=gen, dtype=torch.float64))[0]  # (H, D, D)
    v = torch.randn(b, t, heads, d, generator=gen, dtype=torch.float64)
    v[:, :, 0] = v[:, :, 1:].sum(2)
    z = torch.einsum("hed,bthe->bthd", q, v).flatten(2)  # z_h = Q_h^T v_h
    wo = q.permute(1, 0, 2).flatten(1)  # (D, H*D): [Q_0 Q_1 ...]
    return weights(wo.float(), heads), z.float(), v.sum(2).float()


def test_one_head_coherent_with_the_others(gen):
    layers, heads, d, b, t = 2, 5, 256, 8, 65
    excluded = torch.zeros(t, dtype=torch.bool)
    excluded[0] = True  # the first token left out, as the runner does
    data = [synthetic_layer(gen, heads, d, b, t) for _ in range(layers)]
    ctx = ProbeContext(None, None, tuple(w for w, _, _ in data), layers, d, excluded, 0, 20, 2, "synthetic")
    est = E8Heads(ctx)
    batch = Batch(torch.arange(b), poisson_weights(0, torch.arange(b), 20))
    for i, (_, z, out) in enumerate(data):
        est.update(i, {"attn.heads": z, "attn.output": out}, batch)
    measured = est.measure()
    coherence = np.array(measured.details["head_coherence"])
    assert coherence.shape == (layers, heads)
    # cos(v_0, v_h) = (|v_h|^2 + sum_{k != h} v_h.v_k) / (|v_h| |v_0|) -> 1/sqrt(H-1) = 0.5 as D grows (bias
    # O(1/D) = 0.004); token by token it varies by about 1/sqrt(D) = 0.06, so over the 8 x 64 tokens the mean
    # has a standard deviation near 0.003, and the null (independent tokens) is 0 within the same. Head 0's
    # margin is that mean, 0.5; head h >= 1 is coherent with head 0 only (the cosine is symmetric) and
    # independent of the other H-2, so its margin is 0.5 / (H-1) = 0.125. +-0.03: over 5 standard deviations
    # plus the bias.
    expected = 1 / math.sqrt(heads - 1)
    np.testing.assert_allclose(coherence[:, 0], expected, atol=0.03)
    np.testing.assert_allclose(coherence[:, 1:], expected / (heads - 1), atol=0.03)
    # the per-head margins average to the layer's headline margin (both rounded to 6 significant digits)
    np.testing.assert_allclose(coherence.mean(1), measured.details["cos_minus_null"]["estimate"], rtol=1e-5)


@pytest.mark.parametrize("heads", [2, 6])
def test_independent_heads_have_margins_near_zero(gen, heads):
    d, b, t = 128, 4, 33
    q = torch.linalg.qr(torch.randn(heads, d, d, generator=gen, dtype=torch.float64))[0]
    wo = q.permute(1, 0, 2).flatten(1)
    z = torch.randn(b, t, heads * d, generator=gen, dtype=torch.float64)
    cos = head_cosines(z, head_gram(weights(wo, heads)), heads, z @ wo.T)
    # independent isotropic updates: each cosine has mean 0 and sd 1/sqrt(D) = 0.09; a head's same-token mean
    # averages (H-1) x 33 of them per sequence (sd <= 0.016), the null far more: 0.08 is 5 sd
    assert cos.head.shape == (b, heads)
    assert cos.head.abs().max() < 0.08


def layer_of_updates(u: torch.Tensor, gen) -> tuple[AttnWeights, torch.Tensor, torch.Tensor]:
    """Weights, ``z`` ``(B, T, H*D)`` and attention output ``(B, T, D)`` (float32) of a layer whose heads' updates are
    ``u`` ``(B, T, H, D)``, through random orthogonal ``W_o[:, h] = Q_h`` and ``z_h = Q_h^T u_h``."""
    heads, d = u.shape[2], u.shape[3]
    q = torch.linalg.qr(torch.randn(heads, d, d, generator=gen, dtype=torch.float64))[0]  # (H, D, D)
    z = torch.einsum("hed,bthe->bthd", q, u).flatten(2)
    return weights(q.permute(1, 0, 2).flatten(1).float(), heads), z.float(), u.sum(2).float()


def judged(layers: list[tuple[AttnWeights, torch.Tensor, torch.Tensor]], d: int):
    """E8's ``judge`` on the given layers, fed as one batch (first token excluded, 50 replicates)."""
    b, t = layers[0][1].shape[:2]
    excluded = torch.zeros(t, dtype=torch.bool)
    excluded[0] = True
    ctx = ProbeContext(None, None, tuple(w for w, _, _ in layers), len(layers), d, excluded, 0, 50, 2, "synthetic")
    est = E8Heads(ctx)
    batch = Batch(torch.arange(b), poisson_weights(0, torch.arange(b), 50))
    for i, (_, z, out) in enumerate(layers):
        est.update(i, {"attn.heads": z, "attn.output": out}, batch)
    measured = est.measure()
    return measured, est.judge(measured)


@pytest.mark.parametrize("kind", ["incoherent", "shared direction", "token-specific"])
def test_two_questions_tell_the_kinds_of_coherence(gen, kind):
    layers, heads, d, b, t = 3, 4, 128, 8, 33
    data = []
    for _ in range(layers):
        u = torch.randn(b, t, heads, d, generator=gen, dtype=torch.float64) / math.sqrt(d)  # |u_h| ~ 1
        if kind == "shared direction":  # one fixed unit direction in every head at every token: cos ~ 1/2
            u += torch.nn.functional.normalize(torch.ones(d, dtype=torch.float64), dim=0)
        if kind == "token-specific":  # a direction per token shared by every head: cos ~ 1/2, null ~ 0
            u += torch.randn(b, t, 1, d, generator=gen, dtype=torch.float64) / math.sqrt(d)
        data.append(layer_of_updates(u, gen))
    measured, judgement = judged(data, d)
    raw, margin = (np.array(measured.details[k]["estimate"]) for k in ("mean_pairwise_cos", "cos_minus_null"))
    # cosines of independent isotropic updates: mean 0, sd 1/sqrt(D) = 0.09 per pair, averaged over 6 pairs x 256
    # tokens (sd 0.004); a shared part of norm 1 next to an independent one of norm ~1 gives cos = 1/2 (bias
    # O(1/D)); +-0.05 is over 10 sd plus that bias
    expected_raw = 0.0 if kind == "incoherent" else 0.5
    expected_margin = 0.5 if kind == "token-specific" else 0.0
    np.testing.assert_allclose(raw, expected_raw, atol=0.05)
    np.testing.assert_allclose(margin, expected_margin, atol=0.05)
    assert judgement.details["coherence"] == kind
    assert judgement.verdict == ("supported" if kind == "incoherent" else "not_supported")
    # the coherent control (every head a copy of head 0) through the same rule is never incoherent
    assert judgement.controls[0].verdict == "not_supported"
