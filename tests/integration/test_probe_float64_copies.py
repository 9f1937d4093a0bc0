"""The footprint counts the float64 copies of the attention modules that E5's and E7's replays keep to the end of a
run (``Footprint.copies``): on the float32 Qwen2.5 1.5B they were 1.15 GiB of the 2.1 GiB its second pass began
above its estimate (benchmarks/RESULTS.md). Measured here on a tiny Qwen2 (attention read through replays, with
query/key/value biases) as the parameters of the copies each replay holds when the run drops them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent.parent))
from tiny_models import build_tiny, minilm_tokenizer_dir

import expattn
from expattn.probes.footprint import footprint
from expattn.probes.models.taps import Replay

SIZES = {"tokens": 256, "seq_len": 32, "replicates": 20, "detail_sequences": 4}


@pytest.mark.parametrize("hypotheses", ["E5", "E7", "E6"])
def test_the_float64_copies_a_run_keeps_are_what_its_footprint_counts(monkeypatch, hypotheses):
    from transformers import AutoTokenizer

    kept: list[int] = []
    forget = Replay.forget

    def recording(self: Replay) -> None:
        copy = self._copies.get(torch.float64)
        if copy is not None:
            kept.append(sum(p.numel() * p.element_size() for p in copy.runner.module.parameters()))
        forget(self)

    monkeypatch.setattr(Replay, "forget", recording)
    model = build_tiny("qwen2", seed=5)
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    expected = footprint(c.hidden_size, c.num_hidden_layers, c.num_attention_heads, (hypotheses,),
                         head_dim=head_dim, kv_heads=c.num_key_value_heads, dtype="float32").copies
    expattn.probe(model, AutoTokenizer.from_pretrained(str(minilm_tokenizer_dir())), seed=0,
                  hypotheses=hypotheses, **SIZES)
    if hypotheses == "E6":  # the control: no float64 replay, nothing kept, nothing counted
        assert kept == [] and expected == 0
        return
    assert len(kept) == c.num_hidden_layers  # one copy per attention module, kept until the run's end
    # the footprint counts the four projections' matrices, not their biases ((H + 2 H_kv) d_h entries per layer
    # against (2H + 2 H_kv) d_h D): below it by about 1/D, here 2%
    assert sum(kept) == pytest.approx(expected, rel=0.05)
    assert sum(kept) >= expected
