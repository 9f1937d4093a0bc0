"""A tiny carrier sweep end to end: one run per carrier, same budget, each model probed (E1-E3), table, plot
and records."""

from __future__ import annotations

import json

import pytest
import torch

from expattn.commands.sweep_probe import probe_dynamics
from expattn.nn.carriers import carrier_names
from expattn.nn.lm import LMConfig
from expattn.results.record import load_records
from expattn.sweeps.curves import curve_steps
from expattn.sweeps.layer_dynamics import LayerDynamics, LayerRow
from expattn.sweeps.run import SweepRun, run_sweep, sweep_variants
from expattn.train.loop import TrainConfig


@pytest.mark.slow
def test_carrier_sweep(gen, tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join("abcdef \n"[i] for i in torch.randint(0, 8, (4000,), generator=gen).tolist()))
    base = TrainConfig(out=tmp_path / "sweep", model=LMConfig(context=8, layers=2, heads=2, dim=8),
                       corpus=str(corpus), batch=4, iters=4, eval_every=2, eval_batches=2, progress=False,
                       device="cpu")
    rows = run_sweep("carriers", base, probe_dynamics)
    assert [r.value for r in rows] == [*carrier_names(), "implicit"]
    for r in rows:
        config = json.loads((base.out / r.value / "config.json").read_text())
        implicit = r.value == "implicit"
        assert config["model"]["carrier"] == ("empirical" if implicit else r.value)
        assert config["model"]["implicit"] is implicit
        assert {k: v for k, v in config["train"].items() if k not in ("out", "model", "snapshots")} == {
            k: v for k, v in base.to_json().items() if k not in ("out", "model", "snapshots")
        }  # the same budget and seed for every carrier
        assert config["train"]["snapshots"] == list(curve_steps(base.iters))  # the training curve's exports
        assert len(r.dynamics.layers) == 2 and r.metrics[-1]["iter"] == 4
        assert json.loads((base.out / r.value / "model" / "config.json").read_text())["model_type"] == "expattn-lm"
        assert set(r.dynamics.verdicts) == {"E1", "E2", "E3"} and "skipped" not in r.dynamics.verdicts.values()
        assert r.dynamics.tokens == 256 * 8  # the probe's sample: PROBE_SEQUENCES sequences of the model's context
        for d in r.dynamics.layers:
            assert d.e1_raw_ratio_low <= d.e1_raw_ratio <= d.e1_raw_ratio_high
    assert {p.name for p in base.out.iterdir()} >= {"sweep.json", "sweep.md", "sweep.png"}
    records = load_records(base.out / "sweep.json")
    assert [rec.id for rec in records] == ["E1", "E2", "E3"]
    assert records[0].metrics["empirical.layer1"] == pytest.approx(rows[0].dynamics.layers[1].e1_raw_ratio)
    assert records[0].metrics["normalized.empirical.layer1"] == pytest.approx(
        rows[0].dynamics.layers[1].e1_normalized_ratio
    )
    assert records[2].metrics["empirical.depth2"] == pytest.approx(rows[0].dynamics.e3_output_kurtosis)
    assert records[0].details["probe_verdicts"] == {r.value: r.dynamics.verdicts["E1"] for r in rows}
    runs = json.loads((base.out / "sweep.json").read_text())["runs"]
    assert runs[0]["layers"][1]["e1_raw_ratio"] == rows[0].dynamics.layers[1].e1_raw_ratio
    assert runs[0]["verdicts"] == rows[0].dynamics.verdicts
    table = (base.out / "sweep.md").read_text().splitlines()
    assert len(table) == 2 + len(rows) and all(line.count("|") == 8 for line in table)


def test_unknown_sweep():
    with pytest.raises(ValueError, match="sweep must be one of"):
        sweep_variants("widths")


def _layers(e1: list[float], e2: float) -> tuple[LayerRow, ...]:
    return tuple(LayerRow(layer=i, e1_raw_ratio=r, e1_raw_ratio_low=r - 0.1, e1_raw_ratio_high=r + 0.1,
                          e1_normalized_ratio=r, e2_norm1_ratio=e2, e2_norm1_ratio_low=e2 - 0.1,
                          e2_norm1_ratio_high=e2 + 0.1, e2_norm2_ratio=e2, e2_norm2_ratio_low=e2 - 0.1,
                          e2_norm2_ratio_high=e2 + 0.1, e2_norm1_raw_ratio=e2, e2_norm2_raw_ratio=e2,
                          e3_kurtosis=0.3, e3_participation_ratio=0.5) for i, r in enumerate(e1))


def test_failed_run_is_reported_not_fatal(tmp_path):
    from expattn.sweeps.run import write_summary

    losses = {"train_loss": 2.6, "tokens_per_s": 100.0, "metrics": [{"iter": 4, "val_loss": 2.5}]}
    verdicts = {"E1": "supported", "E2": "supported", "E3": "inconclusive"}
    rows = [
        SweepRun("layernorm", val_loss=2.5, **losses,
                 dynamics=LayerDynamics(_layers([1.1, 2.1], 0.9), 0.4, verdicts, tokens=64, seconds=0.1)),
        SweepRun("rmsnorm", val_loss=2.4, **losses, probe_error="values hold NaN or infinity"),
        SweepRun("whitening", error="x holds a cloud with singular covariance", metrics=[]),
    ]
    write_summary("norms", rows, tmp_path, {"iters": 4})
    table = (tmp_path / "sweep.md").read_text()
    assert "| whitening | failed: x holds a cloud with singular covariance |" in table
    assert "| rmsnorm | 2.4000 | 2.6000 | 100 | probe failed: values hold NaN or infinity |" in table
    assert "| 1.100, 2.100 [supported] |" in table
    e1, e2, e3 = load_records(tmp_path / "sweep.json")
    # one probed model: its verdicts are the sweep's (every model agrees)
    assert (e1.verdict, e2.verdict, e3.verdict) == ("supported", "supported", "inconclusive")
    assert set(e1.metrics) == {"layernorm.layer0", "layernorm.layer1", "normalized.layernorm.layer0",
                               "normalized.layernorm.layer1", "layernorm.val_loss", "rmsnorm.val_loss"}
    assert set(e3.metrics) == {"layernorm.depth0", "layernorm.depth1", "layernorm.depth2"}
    assert "whitening failed" in e1.notes and "rmsnorm failed: values hold NaN" in e1.notes
    runs = json.loads((tmp_path / "sweep.json").read_text())["runs"]
    assert [set(r) for r in runs] == [
        {"value", "val_loss", "train_loss", "tokens_per_s", "metrics", "layers", "e3_output_kurtosis", "verdicts",
         "tokens", "seconds", "headlines", "curve"},
        {"value", "val_loss", "train_loss", "tokens_per_s", "metrics", "probe_error"},
        {"value", "error", "metrics"},
    ]
    assert runs[0]["layers"][1]["e1_raw_ratio_high"] == pytest.approx(2.2)


def test_pooled_verdict_needs_every_model_and_does_not_turn_on_one():
    # The full report's E1 over five normalizations at seeds 0-3: identity and whitening supported, the other
    # three inconclusive or not_supported by seed. A majority gave inconclusive at seeds 0, 1 and not_supported
    # at 2, 3; the models disagree at every seed, which is what the pooled verdict says.
    from expattn.sweeps.run import _pooled

    seed0 = ["supported", "inconclusive", "inconclusive", "inconclusive", "supported"]
    seed2 = ["supported", "not_supported", "not_supported", "not_supported", "supported"]
    assert _pooled(seed0) == _pooled(seed2) == "inconclusive"
    assert _pooled(["not_supported"] * 4) == "not_supported" and _pooled(["supported"]) == "supported"
    assert _pooled([]) == "skipped"
