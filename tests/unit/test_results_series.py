"""Per-layer series read from probe records (``expattn.results.series``) and the sweep's typed E1-E3 rows."""

from __future__ import annotations

import dataclasses

import pytest

from expattn.results.record import Record
from expattn.results.series import LayerSeries, layer_series, layer_values
from expattn.sweeps.layer_dynamics import layer_dynamics


def _series(estimate: list[float]) -> dict:
    return {"estimate": estimate, "low": [e - 0.5 for e in estimate], "high": [e + 0.5 for e in estimate]}


def _records(verdict_e2: str = "supported") -> list[Record]:
    e1 = Record("E1", "empirical", "supported", details={"raw_ratio_excl": _series([1.25, 1.5]),
                                                        "normalized_ratio_excl": _series([1.125, 1.0])})
    e2 = Record("E2", "empirical", verdict_e2, notes="no norm found",
                details={f"norm{n}_{kind}_ratio_excl": _series([0.25 * n + off, 0.5 * n + off])
                         for n in (1, 2) for kind, off in (("normalized", 0.0), ("raw", 1.0))})
    e3 = Record("E3", "empirical", "not_supported", details={"mean_abs_kurtosis_excl": _series([0.1, 0.2, 0.3]),
                                                            "participation_ratio_excl": [0.75, 0.5, 0.25]})
    return [e1, e2, e3]


def test_layer_series_and_values_read_the_details():
    e1, _, e3 = _records()
    assert layer_series(e1, "raw_ratio_excl") == LayerSeries((1.25, 1.5), (0.75, 1.0), (1.75, 2.0))
    assert layer_values(e3, "participation_ratio_excl") == (0.75, 0.5, 0.25)


def test_layer_series_errors_name_the_record_and_series():
    e1, e2, e3 = _records(verdict_e2="skipped")
    with pytest.raises(ValueError, match="E1 record has no per-layer series 'missing'"):
        layer_series(e1, "missing")
    with pytest.raises(ValueError, match=r"E3 details\['participation_ratio_excl'\] must hold 'estimate'"):
        layer_series(e3, "participation_ratio_excl")
    with pytest.raises(ValueError, match=r"E1 details\['raw_ratio_excl'\] must be a list"):
        layer_values(e1, "raw_ratio_excl")
    with pytest.raises(ValueError, match="the probe skipped E2: no norm found"):
        layer_series(e2, "norm1_raw_ratio_excl")
    with pytest.raises(ValueError, match="one value per layer each, got lengths 2, 1 and 2"):
        LayerSeries((1.0, 2.0), (0.0,), (3.0, 4.0))


def test_layer_dynamics_rows():
    dyn = layer_dynamics(_records(), layers=2, tokens=64, seconds=0.5)
    assert [dataclasses.asdict(row) for row in dyn.layers] == [
        {"layer": 0, "e1_raw_ratio": 1.25, "e1_raw_ratio_low": 0.75, "e1_raw_ratio_high": 1.75,
         "e2_norm1_ratio": 0.25, "e2_norm1_ratio_low": -0.25, "e2_norm1_ratio_high": 0.75,
         "e2_norm2_ratio": 0.5, "e2_norm2_ratio_low": 0.0, "e2_norm2_ratio_high": 1.0,
         "e1_normalized_ratio": 1.125, "e2_norm1_raw_ratio": 1.25, "e2_norm2_raw_ratio": 1.5,
         "e3_kurtosis": 0.1, "e3_participation_ratio": 0.75},
        {"layer": 1, "e1_raw_ratio": 1.5, "e1_raw_ratio_low": 1.0, "e1_raw_ratio_high": 2.0,
         "e2_norm1_ratio": 0.5, "e2_norm1_ratio_low": 0.0, "e2_norm1_ratio_high": 1.0,
         "e2_norm2_ratio": 1.0, "e2_norm2_ratio_low": 0.5, "e2_norm2_ratio_high": 1.5,
         "e1_normalized_ratio": 1.0, "e2_norm1_raw_ratio": 1.5, "e2_norm2_raw_ratio": 2.0,
         "e3_kurtosis": 0.2, "e3_participation_ratio": 0.5},
    ]
    assert dyn.e3_output_kurtosis == 0.3  # depth L: the last block's output
    assert dyn.verdicts == {"E1": "supported", "E2": "supported", "E3": "not_supported"}
    assert (dyn.tokens, dyn.seconds) == (64, 0.5)


def test_layer_dynamics_needs_every_hypothesis():
    with pytest.raises(ValueError, match="missing E3"):
        layer_dynamics(_records()[:2], layers=2, tokens=64, seconds=0.5)
    with pytest.raises(ValueError, match="the probe skipped E2"):
        layer_dynamics(_records(verdict_e2="skipped"), layers=2, tokens=64, seconds=0.5)
