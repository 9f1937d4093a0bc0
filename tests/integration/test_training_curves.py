"""Hypotheses along training: a tiny sweep probes each run at its initialisation, at 10% and 30% of its steps and at
the end; the step-0 point is the probe of the untrained model built independently (``LM(cfg)`` under the seed)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import expattn.sweeps.run as sweep_run
from expattn.commands.sweep_probe import probe_dynamics
from expattn.nn.export import export_model
from expattn.nn.lm import LM, LMConfig
from expattn.report.figures_training import training_curves, training_uri
from expattn.results.record import load_records
from expattn.sweeps.curves import curve_steps
from expattn.train.data import CharCorpus
from expattn.train.loop import SNAPSHOT_DIR, TrainConfig

HYPOTHESES = ("E1", "E2", "E3")


def test_curve_steps_are_the_initialisation_and_fractions_of_the_run():
    assert curve_steps(400) == (0, 40, 120)
    assert curve_steps(100) == (0, 10, 30)
    assert curve_steps(3) == (0, 1)  # 10% rounds to 0: each step once, the end left to the final model


def test_snapshots_must_lie_within_the_run(tmp_path):
    with pytest.raises(ValueError, match="snapshots must be a tuple of steps in"):
        TrainConfig(out=tmp_path, iters=10, snapshots=(0, 11))
    with pytest.raises(ValueError, match="snapshots"):
        TrainConfig(out=tmp_path, iters=10, snapshots=[0])


@pytest.fixture
def sweep(gen, tmp_path, monkeypatch):
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join("abcdef \n"[i] for i in torch.randint(0, 8, (4000,), generator=gen).tolist()))
    base = TrainConfig(out=tmp_path / "sweep", model=LMConfig(context=8, layers=2, heads=2, dim=8),
                       corpus=str(corpus), batch=4, iters=10, eval_every=5, eval_batches=2, progress=False,
                       device="cpu", seed=3)
    monkeypatch.setattr(sweep_run, "sweep_variants", lambda kind: {"layernorm": {"norm": "layernorm"}})
    rows = sweep_run.run_sweep("norms", base, probe_dynamics)
    return base, rows


def test_a_sweep_gives_one_point_per_checkpoint_and_step_zero_is_the_untrained_model(sweep, tmp_path):
    base, (row,) = sweep
    assert [p.step for p in row.curve] == [0, 1, 3, 10]
    assert row.curve[-1].headlines == dict(row.dynamics.headlines)  # the end is the final model's probe
    for p in row.curve:
        assert set(p.headlines) == set(p.verdicts) == set(HYPOTHESES)
    # the untrained model, built as the trainer builds it, exported and probed by the same probe
    vocab = CharCorpus.load(base.corpus).vocab
    torch.manual_seed(base.seed)
    untrained = LM(dataclasses.replace(base.model, vocab_size=len(vocab)))
    folder = export_model(untrained, vocab, tmp_path / "untrained")
    fresh = probe_dynamics(folder, base.corpus, base.model.context, base.seed)
    for claim in HYPOTHESES:
        # the same weights, ids and arithmetic on one CPU: equal up to float64 rounding of the reductions
        assert row.curve[0].headlines[claim] == pytest.approx(fresh.headlines[claim], rel=1e-9, abs=1e-12)
        assert row.curve[0].verdicts[claim] == fresh.verdicts[claim]
    trained = probe_dynamics(base.out / "layernorm" / SNAPSHOT_DIR / "3", base.corpus, base.model.context, base.seed)
    assert trained.headlines != fresh.headlines  # a later export holds other weights: the points can differ


def test_the_curves_reach_sweep_json_the_records_and_the_report_figure(sweep):
    base, (row,) = sweep
    run = json.loads((base.out / "sweep.json").read_text())["runs"][0]
    assert [p["step"] for p in run["curve"]] == [0, 1, 3, 10]
    records = load_records(base.out / "sweep.json")
    for record in records:
        points = record.details["curve"]["layernorm"]
        assert [(p["step"], p["value"]) for p in points] == [(p.step, p.headlines[record.id]) for p in row.curve]
    found = dict(training_curves(records))
    assert set(found) == set(HYPOTHESES) and [s for s, _, _ in found["E1"]["layernorm"]] == [0, 1, 3, 10]
    assert training_uri(records).startswith("data:image/svg+xml;base64,")
