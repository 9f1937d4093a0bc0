"""E4 and E9 on models whose queries and keys carry biases: they run, or are skipped, alike in every dtype."""

from __future__ import annotations

import pytest
import torch
from tiny_models import build_tiny

import expattn


def _records(model_type: str, dtype: str, bias: float) -> dict:
    model = build_tiny(model_type, 0, vocab_size=200)
    if bias:
        with torch.no_grad():  # biases 30x the tiny model's weights, as large beside them as Qwen2.5's
            for layer in model.layers:
                layer.self_attn.q_proj.bias.normal_(0, bias)
                layer.self_attn.k_proj.bias.normal_(0, bias)
    ids = torch.randint(0, 200, (16, 32), generator=torch.Generator().manual_seed(0))
    results = expattn.probe(model, input_ids=ids, hypotheses="E4,E9", dtype=dtype, seq_len=32, tokens=512,
                            detail_sequences=4)
    return {r.id: r for r in results.records}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_qwen2_with_large_query_key_biases_runs_e4_and_e9_with_its_bilinear_form_stated(dtype):
    records = _records("qwen2", dtype, 30.0)
    assert {r.verdict for r in records.values()} <= {"supported", "not_supported", "inconclusive"}
    assert all("[x; 1]^T M [y; 1]" in r.details["bilinear_form"] for r in records.values())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_query_key_norms_skip_e4_and_e9_in_every_dtype(dtype):
    records = _records("qwen3", dtype, 0.0)
    assert {r.verdict for r in records.values()} == {"skipped"}
    assert all("q/k norms" in r.notes for r in records.values())
