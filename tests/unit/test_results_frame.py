"""results.csv / ``records_frame``: one row per (record, layer, head, metric), numbers unchanged."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from expattn.results.files import write_json_atomic
from expattn.results.frame import COLUMNS, records_frame
from expattn.results.record import Record, load_records, results_document


def probe_records(gen: torch.Generator) -> tuple[list[Record], dict[str, torch.Tensor]]:
    """A verify record and E1/E4/E7 probe records shaped like the probe's (3 layers, 2 heads)."""
    est, low, high = torch.rand(3, generator=gen) + 1, torch.rand(3, generator=gen), torch.rand(3, generator=gen) + 2
    heads = torch.rand(3, 2, generator=gen)
    series = torch.rand(4, generator=gen)
    records = [
        Record(id="A3", kind="identity", verdict="pass", metrics={"max_error": 1e-15, "ok": True},
               details={"stage": "verify", "curve": [1.0, 2.0]}),
        Record(id="E1", kind="empirical", verdict="supported", metrics={"median_raw_ratio_excl": 1.5, "bad": "nan"},
               details={"stage": "probe", "model": "m", "tensors": {"before": "x", "after": "y"},
                        "raw_ratio_excl": {"estimate": est.tolist(), "low": low.tolist(), "high": high.tolist()}}),
        Record(id="E4", kind="empirical", verdict="not_supported",
               details={"stage": "probe", "model": "m", "cos_sigma_inv": heads.tolist(), "ridge": [0.1, 0.2, 0.3]}),
        Record(id="E7", kind="empirical", verdict="supported",
               details={"stage": "probe", "model": "m", "res_skip": [series.tolist()]}),
    ]
    return records, {"est": est, "low": low, "high": high, "heads": heads, "series": series}


def test_rows_follow_records_layers_and_heads(gen):
    records, drawn = probe_records(gen)
    frame = records_frame(records)
    assert tuple(frame.columns) == COLUMNS
    # 1 metric of A3 (the boolean and its details' list are left out: A3 has no model), 2 of E1 + 3
    # layers, 3 x 2 heads + 3 layers of E4, 4 depths of E7.
    assert len(frame) == 1 + 2 + 3 + 6 + 3 + 4
    a3 = frame[frame.id == "A3"]
    assert a3.metric.tolist() == ["max_error"] and a3.layer.isna().all() and a3.source.tolist() == ["verify"]
    e1 = frame[(frame.id == "E1") & (frame.metric == "raw_ratio_excl")]
    assert e1.layer.tolist() == [0, 1, 2] and e1["head"].isna().all()
    for column, key in (("value", "est"), ("low", "low"), ("high", "high")):
        assert e1[column].tolist() == drawn[key].double().tolist()
    assert math.isnan(frame[(frame.id == "E1") & (frame.metric == "bad")].value.item())
    cos = frame[frame.metric == "cos_sigma_inv"].sort_values(["layer", "head"])
    assert list(zip(cos.layer, cos["head"], strict=True)) == [(i, h) for i in range(3) for h in range(2)]
    assert cos.value.tolist() == drawn["heads"].double().flatten().tolist()
    e7 = frame[frame.id == "E7"]
    assert e7.layer.tolist() == [0, 1, 2, 3] and e7["head"].isna().all()
    assert e7.value.tolist() == drawn["series"].double().tolist()
    assert set(frame.record) == {0, 1, 2, 3} and (frame[frame.id != "A3"].model == "m").all()


def test_csv_reads_back_with_the_same_numbers(tmp_path, gen):
    records, _ = probe_records(gen)
    write_json_atomic(tmp_path / "results.json", results_document(records, "test"))
    frame = records_frame(load_records(tmp_path / "results.json"))
    frame.to_csv(tmp_path / "results.csv", index=False)
    back = pd.read_csv(tmp_path / "results.csv", dtype={"layer": "Int64", "head": "Int64"}, keep_default_na=False,
                       na_values=[""])
    assert back.shape == frame.shape
    pd.testing.assert_series_equal(back.value, frame.value, rtol=0, atol=0)
    assert back.layer.equals(frame.layer)


def test_no_records_give_an_empty_table_and_wrong_input_is_refused():
    assert list(records_frame([]).columns) == list(COLUMNS) and records_frame([]).empty
    with pytest.raises(TypeError, match="records must be a sequence of Record"):
        records_frame([{"id": "A1"}])
