"""Gemma 3 270M, the built-in ``gemma3``: assembled from its chunk packages, dequantised once, probed by name."""

from __future__ import annotations

import pytest

import expattn
from expattn.probes.hypotheses import hypotheses
from expattn.probes.models.loading import read_config, resolve_model_dir


@pytest.mark.slow
def test_gemma3_loads_and_every_hypothesis_is_measured_or_skipped_with_a_reason():
    config = read_config(resolve_model_dir("gemma3"))
    assert (config["model_type"], config["num_attention_heads"], config["num_key_value_heads"]) == ("gemma3_text", 4, 1)
    res = expattn.probe("gemma3", tokens=1024, seq_len=128, replicates=50, detail_sequences=4)
    assert sorted(res.verdicts) == sorted(hypotheses())
    assert res.verdicts["E5"] == "pass"
    assert "error" not in res.verdicts.values()
    assert all(r.notes.strip() for r in res.records if r.verdict == "skipped")
    e8 = next(r for r in res.records if r.id == "E8")  # W_o z, not the post-normed attention output
    assert 0 < e8.metrics["median_energy_ratio"] <= config["num_attention_heads"]
