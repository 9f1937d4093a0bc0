"""A hypothesis is its catalogue entry, its estimator and one registration: a throwaway estimator registered here
(the residual stream grows with depth) flows through ``--only``, the records, the footprint and the report's matrix
with nothing else edited; model readings offer capabilities by name and estimators name what they need, so no
model reading names a hypothesis."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_models import save_tiny
from typer.testing import CliRunner

import expattn.catalogue as catalogue
from expattn.cli import app
from expattn.probes import hypotheses as registry
from expattn.probes.footprint import footprint, statistics_bytes
from expattn.probes.hypotheses.base import Estimator, Judgement, Measured
from expattn.probes.models.adapters import CAPABILITIES
from expattn.report.cards import Card
from expattn.report.matrix import build_matrix
from expattn.results.record import Control, load_records

ROOT = Path(__file__).resolve().parents[2]
TOY = "E10" if "E10" not in catalogue.ids() else "E99"  # an ID the catalogue does not have yet


def _growth(norms: np.ndarray) -> str:
    """The toy rule: supported iff the last depth's mean squared norm exceeds the first's."""
    return "supported" if norms[-1] > norms[0] else "not_supported"


class Growth(Estimator):
    """The mean squared norm of the residual stream at every depth (the input, then each block's output)."""

    claim = TOY
    tensors = ("input", "output")
    method = "mean squared norm of the residual stream per depth"
    criterion = ("supported iff the last depth's mean squared norm exceeds the first's; the depths reversed, through "
                 "the same rule, must not be supported")

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.squares_ = torch.zeros(ctx.layers + 1, dtype=torch.float64)
        self.tokens_ = 0

    def update(self, i, tensors, batch) -> None:
        if i == 0:
            self.squares_[0] += tensors["input"].double().square().sum().cpu()
            self.tokens_ += tensors["input"].shape[0] * tensors["input"].shape[1]
        self.squares_[i + 1] += tensors["output"].double().square().sum().cpu()

    def merge(self, other: Growth) -> None:
        self.squares_ += other.squares_
        self.tokens_ += other.tokens_

    def measure(self) -> Measured:
        norms = (self.squares_ / self.tokens_).numpy()
        return Measured({"norms": norms}, {"growth": float(norms[-1] / norms[0])}, {"norms": norms.tolist()})

    def judge(self, measured: Measured) -> Judgement:
        reversed_depths = measured.arrays["norms"][::-1]
        control = Control("depths reversed", "negative", _growth(reversed_depths))
        return Judgement(_growth(measured.arrays["norms"]), [control], "")

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        return []

    @staticmethod
    def statistics_bytes(n) -> int:
        return 8 * (n.layers + 1)


@pytest.fixture
def toy(monkeypatch):
    """The toy claim in the catalogue and its estimator in the registry, both gone after the test."""
    item = dataclasses.replace(catalogue.entry("E1"), id=TOY, title="the residual stream grows", curve=None,
                               head_map=None, headline=("growth", "last depth's mean squared norm over the first's"))
    monkeypatch.setattr(catalogue, "ENTRIES", (*catalogue.ENTRIES, item))
    monkeypatch.setitem(catalogue._BY_ID, TOY, item)
    registry.register_estimator(Growth)
    yield Growth
    registry.ESTIMATORS.remove(Growth)


def test_a_registered_estimator_flows_through_only_the_records_footprint_and_matrix(toy, tmp_path):
    folder = save_tiny("llama", tmp_path / "tiny-llama", seed=3)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--only", TOY, "--tokens", "64",
                                      "--seq-len", "16", "--out", str(out)])
    assert result.exit_code == 0, result.output
    records = load_records(out / "results.json")
    assert [r.id for r in records] == [TOY]
    (record,) = records
    assert record.verdict in ("supported", "not_supported") and record.statement == catalogue.entry(TOY).statement
    assert TOY in result.output  # the CLI's table

    held = statistics_bytes(hidden=64, layers=3, heads=4)
    assert held[TOY] == 8 * 4 and set(held) == set(registry.hypotheses())
    assert footprint(64, 3, 4, (TOY,)).statistics == {TOY: 32}

    matrix = build_matrix([Card("toy", "toy", record)], {TOY: "the residual stream grows"})
    (row,) = matrix.rows
    assert row.claim_id == TOY and row.headline == catalogue.entry(TOY).headline[1]
    assert row.cells[0][0].verdict == record.verdict and row.cells[0][0].value != ""


def test_registration_refuses_what_the_catalogue_or_the_readings_do_not_know(toy):
    with pytest.raises(ValueError, match="already has an estimator"):
        registry.register_estimator(Growth)
    with pytest.raises(ValueError, match=r"needs unknown capability 'attention\.magic'"):
        registry.register_estimator(type("Magic", (Growth,), {"needs": ("attention.magic",)}))
    with pytest.raises(ValueError, match="not measured by the probe"):
        registry.register_estimator(type("Family", (Growth,), {"claim": "A1"}))


def test_every_estimator_needs_only_known_capabilities():
    for cls in registry.ESTIMATORS:
        assert set(cls.needs) <= set(CAPABILITIES), cls.claim


def test_no_model_reading_names_a_hypothesis():
    """The readings offer capabilities; which hypotheses need them is the estimators' business."""
    for path in sorted((ROOT / "src" / "expattn" / "probes" / "models").glob("*.py")):
        code = "\n".join(line.split("#")[0] for line in path.read_text().splitlines())
        named = re.findall(r"""["']E\d+["']""", code)
        assert not named, (path.name, named)
