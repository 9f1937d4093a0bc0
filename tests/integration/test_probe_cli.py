"""End to end: ``expattn probe`` on the real all-MiniLM-L6-v2 and Shakespeare, through the CLI."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from expattn.probes.hypotheses import hypotheses


@pytest.mark.slow
def test_probe_minilm_end_to_end(tmp_path):
    from typer.testing import CliRunner

    from expattn.cli import app
    from expattn.results.record import load_records

    out = tmp_path / "minilm"
    result = CliRunner().invoke(
        app, ["probe", "--model", "minilm", "--tokens", "1024", "--seed", "3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "results.json").read_text())
    assert doc["command"] == "probe" and doc["tokens"] == 1024 and doc["seeds"] == {"seed": 3}
    assert doc["model"]["family"] == "bert" and doc["model"]["layers"] == 6 and doc["model"]["heads"] == 12
    clock = json.loads((out / "timings.json").read_text())  # the wall clock, beside the records
    assert 0 < clock["forward_seconds"] < clock["seconds"] and "seconds" not in doc
    records = load_records(out / "results.json")
    assert [r.id for r in records] == list(hypotheses())
    for r in records:
        if r.id == "E5":  # the probe's self-check: an identity
            assert r.kind == "identity" and r.verdict == "pass", r
        else:
            assert r.kind == "empirical" and r.verdict in ("supported", "not_supported", "inconclusive"), r
        # every verdict states its rule and runs a negative control through it, which must reject the claim
        assert r.criterion, r.id
        negatives = [c for c in r.controls if c.kind == "negative"]
        assert negatives, r.id
        assert all(c.verdict in ("fail", "not_supported") for c in negatives), (r.id, r.controls)
        assert all(c.verdict in ("pass", "supported") for c in r.controls if c.kind == "positive"), (r.id, r.controls)
        assert r.statement and r.source and r.method
        for name in r.plots:
            with Image.open(out / name) as img:  # a real, non-trivial PNG
                assert img.format == "PNG" and min(img.size) > 200
    by_id = {r.id: r for r in records}
    # E5 is an exact identity: it must hold on all 72 heads to float32 rounding
    e5 = by_id["E5"]
    assert e5.verdict == "pass" and e5.metrics["heads_checked"] == 72
    assert e5.metrics["max_error_over_bound"] <= 1 < e5.metrics["min_null_over_bound"]
    # per-layer tables cover the 6 layers with intervals that contain their estimates
    e1 = by_id["E1"].details["raw_ratio_excl"]
    assert len(e1["estimate"]) == 6
    assert all(lo <= est <= hi for lo, est, hi in zip(e1["low"], e1["estimate"], e1["high"], strict=True))
    assert "expattn probe --model minilm" in result.output
