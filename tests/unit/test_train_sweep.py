"""A tiny carrier sweep end to end: one run per carrier, same budget, table, plot and records."""

from __future__ import annotations

import json

import pytest
import torch

from expattn.nn.carriers import carrier_names
from expattn.nn.lm import LMConfig
from expattn.report.schema import load_records
from expattn.train.loop import TrainConfig
from expattn.train.sweep import run_sweep, sweep_values


@pytest.mark.slow
def test_carrier_sweep(gen, tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join("abcdef \n"[i] for i in torch.randint(0, 8, (4000,), generator=gen).tolist()))
    base = TrainConfig(out=tmp_path / "sweep", model=LMConfig(context=8, layers=2, heads=2, dim=8),
                       corpus=str(corpus), batch=4, iters=4, eval_every=2, eval_batches=2, progress=False,
                       device="cpu")
    rows = run_sweep("carriers", base)
    assert [r["value"] for r in rows] == [*carrier_names(), "implicit"]
    for r in rows:
        config = json.loads((base.out / r["value"] / "config.json").read_text())
        implicit = r["value"] == "implicit"
        assert config["model"]["carrier"] == ("empirical" if implicit else r["value"])
        assert config["model"]["implicit"] is implicit
        assert {k: v for k, v in config["train"].items() if k not in ("out", "model")} == {
            k: v for k, v in base.to_json().items() if k not in ("out", "model")
        }  # the same budget and seed for every carrier
        assert len(r["layers"]) == 2 and r["metrics"][-1]["iter"] == 4
    assert {p.name for p in base.out.iterdir()} >= {"sweep.json", "sweep.md", "sweep.png"}
    records = load_records(base.out / "sweep.json")
    assert [rec.id for rec in records] == ["E1", "E2", "E3"]
    assert records[0].metrics["empirical.layer1"] == pytest.approx(rows[0]["layers"][1]["e1_spread_ratio_scaled"])
    assert records[0].metrics["raw.empirical.layer1"] == pytest.approx(rows[0]["layers"][1]["e1_spread_ratio"])
    table = (base.out / "sweep.md").read_text().splitlines()
    assert len(table) == 2 + len(rows) and all(line.count("|") == 8 for line in table)


def test_unknown_sweep():
    with pytest.raises(ValueError, match="sweep must be one of"):
        sweep_values("widths")


def test_failed_run_is_reported_not_fatal(tmp_path):
    from expattn.train.sweep import write_summary

    layers = [{"layer": i, "e1_spread_ratio": 1.2, "e1_spread_ratio_scaled": 1.1 + i, "e2_spread_ratio": 0.5,
               "e2_spread_ratio_scaled": 0.9, "e3_excess_kurtosis": 0.3, "e3_effective_rank_ratio": 0.5}
              for i in range(2)]
    rows = [
        {"value": "layernorm", "val_loss": 2.5, "train_loss": 2.6, "tokens_per_s": 100.0,
         "metrics": [{"iter": 4, "val_loss": 2.5}], "layers": layers},
        {"value": "whitening", "error": "x holds a cloud with singular covariance", "metrics": []},
    ]
    write_summary("norms", rows, tmp_path, {"iters": 4})
    table = (tmp_path / "sweep.md").read_text()
    assert "| whitening | failed: x holds a cloud with singular covariance |" in table
    e1, e2, _ = load_records(tmp_path / "sweep.json")
    assert e1.verdict == "supported" and e2.verdict == "supported"  # 1.1, 2.1 > 1 and 0.9 < 1
    assert set(e1.metrics) == {"layernorm.layer0", "layernorm.layer1", "raw.layernorm.layer0",
                               "raw.layernorm.layer1", "layernorm.val_loss"}
    assert "whitening failed" in e1.notes
