"""Model adapters on tiny random BERT / GPT-2 / Llama models: every sublayer named, every name the
tensor it claims to be (checked against HF's own hidden states and direct recomputation), and the
E5 identity and E8 head algebra on the models' own weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_models import build_tiny

from expattn.probes.hypotheses.base import Batch, ProbeContext
from expattn.probes.hypotheses.e4_readings import sym_cos
from expattn.probes.hypotheses.e5_gradient import E5Gradient
from expattn.probes.hypotheses.e8_heads import head_cosines, head_gram
from expattn.probes.models.adapters import Capture, adapter_for
from expattn.probes.models.attention import AttnWeights, head_outputs, head_updates

NAMES = {
    "input",
    "attn.input",
    "attn.heads",
    "attn.output",
    "attn.residual",
    "norm1.input",
    "norm1.output",
    "norm2.input",
    "norm2.output",
    "mlp.input",
    "mlp.output",
    "mlp.skip",
    "output",
}


def tiny(family: str, seed: int) -> torch.nn.Module:
    return build_tiny(family, seed, vocab_size=100, intermediate_size=48, max_position_embeddings=64)


def capture(model: torch.nn.Module, family: str, ids: torch.Tensor) -> tuple[dict, object]:
    seen: dict[int, dict] = {}
    with torch.no_grad(), Capture(model, adapter_for(model.config.model_type), lambda i, t: seen.__setitem__(i, t)):
        out = model(input_ids=ids, output_hidden_states=True)
    return seen, out


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_adapter_names_every_sublayer_and_tensors_match(gen, family):
    seed = int(torch.randint(0, 10_000, (1,), generator=gen))
    model = tiny(family, seed)
    adapter = adapter_for(model.config.model_type)
    ids = torch.randint(0, 100, (3, 11), generator=gen)
    seen, out = capture(model, family, ids)
    assert sorted(seen) == [0, 1]
    for i, t in seen.items():
        assert set(t) == NAMES
        assert set(Capture(model, adapter, print).names(i)) == {f"layers.{i}.{n}" for n in NAMES}
        # independent references: HF's own hidden states and the residual algebra (float32 sums: 1e-5)
        torch.testing.assert_close(t["input"], out.hidden_states[i], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(t["attn.residual"], t["input"] + t["attn.output"], rtol=1e-5, atol=1e-5)
        norm1 = adapter.norm1(model, i)
        torch.testing.assert_close(t["norm1.output"], norm1(t["norm1.input"]), rtol=1e-5, atol=1e-5)
        if adapter.norm_position == "pre":
            torch.testing.assert_close(t["output"], t["mlp.skip"] + t["mlp.output"], rtol=1e-5, atol=1e-5)
            assert torch.equal(t["attn.input"], t["norm1.output"])
        else:
            torch.testing.assert_close(t["norm2.input"], t["mlp.skip"] + t["mlp.output"], rtol=1e-5, atol=1e-5)
            if i + 1 < len(out.hidden_states):
                torch.testing.assert_close(t["output"], out.hidden_states[i + 1], rtol=1e-5, atol=1e-5)
        # the recomputed attention (rotary, GQA, causal mask, Conv1D split) reproduces the model's heads
        w = adapter.attention(model, i)
        torch.testing.assert_close(head_outputs(t["attn.input"], w), t["attn.heads"], rtol=2e-5, atol=2e-5)
        # per-head updates sum to the attention branch output (bias aside)
        u = head_updates(t["attn.heads"], w).sum(-2)
        torch.testing.assert_close(u if w.bo is None else u + w.bo, t["attn.output"], rtol=1e-4, atol=1e-5)


def test_unsupported_architecture_lists_supported():
    with pytest.raises(ValueError, match=r"supported model types: .*bert.*gpt2.*llama"):
        adapter_for("t5")


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_e5_identity_holds_on_every_head(gen, family):
    model = tiny(family, int(torch.randint(0, 10_000, (1,), generator=gen)))
    adapter = adapter_for(model.config.model_type)
    ids = torch.randint(0, 100, (2, 16), generator=gen)
    layers = len(adapter.blocks(model))
    ctx = ProbeContext(
        model,
        adapter,
        tuple(adapter.attention(model, i) for i in range(layers)),
        layers,
        32,
        torch.zeros(16, dtype=torch.bool),
        0,
        10,
        2,
        family,
    )
    est = E5Gradient(ctx)
    batch = Batch(torch.arange(2), torch.ones(2, 10, dtype=torch.float64))
    with torch.no_grad(), Capture(model, adapter, lambda i, t: est.update(i, t, batch)):
        model(input_ids=ids)
    record = est.result(None)
    assert record.verdict == "pass" and record.kind == "identity"
    assert [c.verdict for c in record.controls] == ["fail", "fail"]  # doubled temperature, shuffled values
    assert record.metrics["heads_checked"] == layers * ctx.attention[0].heads
    assert 0 <= record.metrics["max_error_over_bound"] <= 1
    assert 0 < record.metrics["max_reconstruction_over_bound"] <= 1
    # the null (temperature doubled) must fail by orders of magnitude on every head: the check can fail
    assert record.metrics["min_null_over_bound"] > 100


def test_sym_cos_matches_explicit_frobenius(gen):
    d, r = 12, 3
    u, v = torch.randn(2, r, d, generator=gen, dtype=torch.float64).unbind(0)
    b = torch.randn(d, d, generator=gen, dtype=torch.float64)
    b = b @ b.T
    a = u.T @ v
    a = (a + a.T) / 2
    for target in (b, torch.eye(d, dtype=torch.float64)):
        ref = (a * target).sum() / (a.norm() * target.norm())
        got = sym_cos(u, v, None if target is not b else b)
        assert got.item() == pytest.approx(ref.item(), rel=1e-12)


def test_head_cosines_match_explicit_updates(gen):
    heads, dh, d, b, t = 4, 5, 9, 2, 7
    wo = torch.randn(d, heads * dh, generator=gen, dtype=torch.float64)
    zeros = torch.zeros(heads * dh, d, dtype=torch.float64)
    w = AttnWeights(zeros, None, zeros, None, zeros, None, wo, None, heads, heads, 1.0, False)
    z = torch.randn(b, t, heads * dh, generator=gen, dtype=torch.float64)
    same, null, energy, _ = head_cosines(z, head_gram(w), heads, z @ wo.T)
    u = head_updates(z, w)  # (B, T, H, D)
    un = u / u.norm(dim=-1, keepdim=True)
    off = ~torch.eye(heads, dtype=torch.bool)
    ref_same = torch.einsum("bthd,btkd->bthk", un, un)[..., off].mean((1, 2))
    cos = torch.einsum("bthd,bskd->btshk", un, un)  # every token pair and head pair, explicitly
    ref_null = cos[:, ~torch.eye(t, dtype=torch.bool)][..., off].mean((1, 2))  # s != t and h != h'
    ref_energy = (u.sum(-2).pow(2).sum(-1) / u.pow(2).sum((-1, -2))).mean(1)
    for got, ref in ((same, ref_same), (null, ref_null), (energy, ref_energy)):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-10, atol=1e-12)
