"""B8 preset: per-head updates against torch's MultiheadAttention, alignment statistics, quick verdicts."""

from __future__ import annotations

import pytest
import torch

from expattn.catalogue.registry import RunContext
from expattn.commands.checks import run_claim, select
from expattn.presets.b8_heads import alignment, head_updates


def test_head_updates_sum_to_multihead_attention(gen):
    heads, dim, tokens = 4, 16, 10
    d = dim // heads
    mha = torch.nn.MultiheadAttention(dim, heads, bias=False, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.randn(3 * dim, dim, generator=gen, dtype=torch.float64))
        mha.out_proj.weight.copy_(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    wq, wk, wv = mha.in_proj_weight.detach().split(dim)  # each (D, D); head h owns rows h*d:(h+1)*d
    wo = mha.out_proj.weight.detach()  # (D, D); head h owns columns h*d:(h+1)*d
    per_head = torch.stack([
        torch.stack([w[h * d:(h + 1) * d].T for w in (wq, wk, wv)] + [wo[:, h * d:(h + 1) * d]])
        for h in range(heads)
    ])  # (H, 4, D, d)
    x = torch.randn(tokens, dim, generator=gen, dtype=torch.float64)
    expected, _ = mha(x[None], x[None], x[None], need_weights=False)
    torch.testing.assert_close(head_updates(x, per_head).sum(0), expected[0], rtol=0, atol=1e-12)  # float64


def test_alignment_of_identical_and_orthogonal_updates(gen):
    u = torch.randn(1, 50, 8, generator=gen, dtype=torch.float64)
    same = alignment(u.expand(3, 50, 8), gen)
    assert same["cos"] == pytest.approx(1.0, abs=1e-12) and same["energy_ratio"] == pytest.approx(3.0, rel=1e-12)
    eye = torch.eye(4, dtype=torch.float64)
    orth = alignment(eye[:, None, :].expand(4, 6, 4).clone(), gen)  # head h always points along axis h
    assert orth["cos"] == pytest.approx(0.0, abs=1e-12) and orth["energy_ratio"] == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_quick_preset_supports_incoherence_and_detects_the_control(tmp_path, seed):
    (claim,) = select("simulate", ["b8-heads"])
    record = run_claim(claim, RunContext(seed=seed, out_dir=tmp_path, quick=True))
    assert record.verdict == "supported", record.notes
    assert record.metrics["control_energy_ratio"] == pytest.approx(record.metrics["heads"], rel=1e-6)
    assert (tmp_path / record.plots[0]).stat().st_size > 0


def test_negative_controls_are_judged_not_supported_by_the_same_rule():
    (claim,) = select("simulate", ["b8-heads"])
    record = run_claim(claim, RunContext(seed=0, quick=True))
    verdicts = {c.name: (c.kind, c.verdict) for c in record.controls}
    assert verdicts == {
        "one distortion shared by every head": ("negative", "not_supported"),
        "x W_v W_o without attention": ("negative", "not_supported"),
        "uniform averaging": ("negative", "not_supported"),
    }
    assert record.verdict == "supported" and record.criterion.startswith("supported iff")


def test_gradient_error_separates_attention_from_linear_maps_and_uniform_averaging(gen):
    from expattn.presets.b8_heads import _weights, gradient_error, linear_updates, uniform_updates

    x = torch.randn(32, 16, generator=gen, dtype=torch.float64)
    w = _weights(gen, 4, 16, shared=False)
    assert gradient_error(x, w, head_updates(x, w)) < 1e-13  # float64 round-off of the same sums
    # Without attention the update is not the softmax-weighted mean: off by order one.
    assert gradient_error(x, w, linear_updates(x, w)) > 0.1
    assert gradient_error(x, w, uniform_updates(x, w)) > 0.1
