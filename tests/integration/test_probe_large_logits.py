"""E5 on a tiny Qwen2 whose query and key biases are as large as Qwen2.5-Coder-0.5B's, in float32 and bfloat16.

The real model's layer-0 key bias has entries up to 145 (standard deviation 35) and its query bias up to 81
(standard deviation 8); its logits reach 1,457, against at most 57 in SmolLM2. With such logits the two float32
sides of E5's identity differ by more than the float32 rounding of a length-T sum alone (T eps32): a fixed
tolerance of that size failed the real model's self-check (max error 6.0e-5 against 1.5e-5) although its
attention is reconstructed to 8e-7. The bound derived per query from its logits, T and the keys' cancellation
(``expattn.probes.models.rounding.identity_bound``) covers them, and the negative controls still exceed it on
every head.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent))
from tiny_models import build_tiny, minilm_tokenizer_dir, probe_text

import expattn
from expattn.probes.models.rounding import identity_bound

SEQ_LEN = 64
KEY_BIAS_STD, QUERY_BIAS_STD = 35.0, 8.0  # Qwen2.5-Coder-0.5B, layer 0


def _large_bias_qwen2() -> torch.nn.Module:
    """The tiny Qwen2 with the real model's bias scale on every layer (seeded)."""
    model = build_tiny("qwen2")
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for layer in model.layers:
            attn = layer.self_attn
            attn.k_proj.bias.copy_(KEY_BIAS_STD * torch.randn(attn.k_proj.bias.shape, generator=gen))
            attn.q_proj.bias.copy_(QUERY_BIAS_STD * torch.randn(attn.q_proj.bias.shape, generator=gen))
    return model


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_e5_passes_with_qwen_sized_biases_and_its_controls_fail(dtype):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_tokenizer_dir()))
    text = probe_text()
    texts = Path(text, "corpus.txt").read_text() if text else None
    res = expattn.probe(_large_bias_qwen2(), tokenizer, texts=texts, hypotheses="E5", tokens=8 * SEQ_LEN,
                        seq_len=SEQ_LEN, detail_sequences=8, dtype=dtype)
    record = res.records[0]
    # the logits are Qwen-sized: the fixed T eps32 is exceeded, the derived bound is not
    assert record.metrics["max_error"] > SEQ_LEN * float(torch.finfo(torch.float32).eps), record.metrics
    assert record.verdict == "pass", record.metrics
    assert 0 < record.metrics["max_error_over_bound"] <= 1
    assert [c.verdict for c in record.controls] == ["fail", "fail"]
    assert record.metrics["min_null_over_bound"] > 10 and record.metrics["min_shuffled_values_over_bound"] > 10


def test_identity_bound_holds_for_large_logits_and_a_wrong_key_exceeds_it():
    """On random float32 logits of size up to ~1,000, both sides of the identity differ by less than the bound; keys
    off by 1e-4 of themselves on one side, a probe error far below any control's, exceed it."""
    gen = torch.Generator().manual_seed(1)
    t, dh = 128, 16
    q = 20.0 * torch.randn(2, 3, t, dh, generator=gen)
    k = torch.randn(2, 3, t, dh, generator=gen) + 6.0  # a shared offset: large logits, keys that do not cancel
    causal = torch.ones(t, t, dtype=torch.bool).triu(1)
    with torch.enable_grad():
        qq = q.clone().requires_grad_(True)
        logits = ((qq @ k.transpose(-1, -2)) / dh**0.5).masked_fill(causal, float("-inf"))
        grad = torch.autograd.grad(torch.logsumexp(logits, -1).sum(), qq)[0] * dh**0.5
    logits = logits.detach()
    assert logits[logits.isfinite()].abs().max() > 300
    bound = identity_bound(logits, k)
    out = logits.softmax(-1) @ k
    err = (grad.double() - out.double()).norm(dim=-1) / out.double().norm(dim=-1)
    assert (err / bound).max() <= 1
    off = logits.softmax(-1) @ (k * (1 + 1e-4))
    err_off = (grad.double() - off.double()).norm(dim=-1) / off.double().norm(dim=-1)
    assert (err_off / bound).max() > 1
