"""``results.seed_spread``: each headline's median and range over seeds, on records whose answer is known by
hand; ``seeds.check_seeds``' errors."""

from __future__ import annotations

import pytest

from expattn.report.markdown import spread_section
from expattn.results.record import Record
from expattn.results.seed_spread import seed_spread, spread_document, spread_frame, spread_name
from expattn.seeds import check_seeds

HEADLINES = {"E1": ("ratio", "spread ratio"), "E5": ("max_error", "error")}


def _record(i: str, verdict: str, **metrics) -> Record:
    return Record(id=i, kind="empirical", verdict=verdict, metrics=metrics)


def _runs() -> dict:
    return {
        0: [_record("E1", "supported", ratio=1.10), _record("E5", "pass", max_error=2e-6)],
        1: [_record("E1", "inconclusive", ratio=1.30), _record("E5", "pass", max_error=1e-6)],
        2: [_record("E1", "supported", ratio=1.05), _record("E5", "pass", max_error=float("nan"))],
    }


def test_median_and_range_over_seeds():
    e1, e5 = seed_spread(_runs(), HEADLINES)
    assert (e1.median, e1.low, e1.high) == (1.10, 1.05, 1.30)  # median of 1.10, 1.30, 1.05
    assert e1.verdicts == ("supported", "inconclusive", "supported") and not e1.verdicts_agree
    # a non-finite number is no value: the median of the two others
    assert e5.values == (2e-6, 1e-6, None) and e5.median == pytest.approx(1.5e-6, rel=1e-12)
    assert e5.verdicts_agree
    doc = spread_document([e1, e5], "minilm")
    assert doc["seeds"] == [0, 1, 2] and doc["hypotheses"][0]["max"] == 1.30
    assert doc["dtype"] == "float32" and spread_name(doc) == "minilm"
    half = spread_document([e1, e5], "qwen2.5-1.5b", "bfloat16")  # a column or legend says the dtype
    assert spread_name(half) == "qwen2.5-1.5b (bfloat16)" and "| qwen2.5-1.5b (bfloat16) |" in spread_section([half])[4]
    del doc["dtype"]  # written before seeds.json said its dtype: float32
    assert spread_name(doc) == "minilm"
    frame = spread_frame([e1, e5])
    assert list(frame["verdict 1"]) == ["inconclusive", "pass"] and frame["seed 2"].iloc[0] == 1.05


def test_the_twins_class_at_each_seed_is_kept_and_shown():
    runs = {s: [Record(id="E1", kind="empirical", verdict="supported", metrics={"ratio": 1.1}, training=t)]
            for s, t in ((0, "learned"), (1, "undecided"), (2, "learned"))}
    (e1,) = seed_spread(runs, HEADLINES)
    assert e1.training == ("learned", "undecided", "learned")
    doc = spread_document([e1], "qwen")
    assert doc["hypotheses"][0]["training"] == ["learned", "undecided", "learned"]
    assert list(spread_frame([e1])["training 1"]) == ["undecided"]
    row = next(line for line in spread_section([doc]) if line.startswith("| E1"))
    assert "supported; twins: learned, undecided, learned" in row
    # the same class at every seed is said once; without twins nothing is said and seeds.json has no key
    runs = {s: [Record(id="E1", kind="empirical", verdict="supported", metrics={"ratio": 1.1},
                       training="architectural")] for s in (0, 1)}
    doc = spread_document(seed_spread(runs, HEADLINES), "qwen")
    assert "supported; twins: architectural |" in next(x for x in spread_section([doc]) if x.startswith("| E1"))
    (plain,) = seed_spread({s: [_record("E1", "supported", ratio=1.0)] for s in (0, 1)}, HEADLINES)
    plain_row = next(x for x in spread_section([spread_document([plain], "m")]) if x.startswith("| E1"))
    assert "training" not in plain.as_dict() and "twins" not in plain_row


def test_a_skipped_record_has_no_number():
    runs = {s: [_record("E1", "skipped")] for s in (0, 1)}
    (e1,) = seed_spread(runs, HEADLINES)
    assert e1.values == (None, None) and e1.median is None and e1.low is None


def test_runs_that_measured_different_hypotheses_are_refused():
    with pytest.raises(ValueError, match="seed 1 measured"):
        seed_spread({0: [_record("E1", "pass", ratio=1.0)], 1: [_record("E5", "pass")]}, HEADLINES)
    with pytest.raises(ValueError, match="at least two seeds"):
        seed_spread({0: [_record("E1", "pass")]}, HEADLINES)


@pytest.mark.parametrize(("seeds", "error", "fragment"), [
    ([0], ValueError, "at least two"), ([1, 1], ValueError, "repeat"), ([0, -1], ValueError, "[0, 2**63)"),
    ("0,1", TypeError, "list of integers"), ([0, 1.5], TypeError, "integer"), ([True, 2], TypeError, "integer"),
])
def test_bad_seeds_name_the_argument(seeds, error, fragment):
    with pytest.raises(error, match="seeds") as caught:
        check_seeds(seeds)
    assert fragment in str(caught.value)


def test_good_seeds_come_back_as_a_tuple():
    assert check_seeds([2, 0, 1]) == (2, 0, 1)
