"""The trained-vs-twins classification (``results.twin``): its truth table for one twin and for several, the twin
controls and their spread, the record field's round trip through a results file, and the report's mark and
section."""

from __future__ import annotations

import json

import pytest

from expattn.catalogue import headlines
from expattn.report.cards import Card
from expattn.report.markdown import render_markdown
from expattn.report.matrix import ARCHITECTURAL_MARK, build_matrix
from expattn.report.twins import twin_rows
from expattn.results.record import VERDICTS, Control, Record, enforce_controls, load_records, results_document
from expattn.results.twin import TWIN_CONTROL, attach_twin, training

# Written out by hand from the rule (not computed by it): decisive = pass, fail, supported, not_supported.
ACCEPT, REJECT = ("pass", "supported"), ("fail", "not_supported")
NOT_DECISIVE = ("inconclusive", "skipped", "error")
TABLE = {
    **{(a, b): "architectural" for a in ACCEPT for b in ACCEPT},
    **{(a, b): "architectural" for a in REJECT for b in REJECT},
    **{(a, b): "learned" for a in ACCEPT for b in REJECT},
    **{(a, b): "learned" for a in REJECT for b in ACCEPT},
    **{(a, b): "undecided" for a in VERDICTS for b in NOT_DECISIVE},
    **{(a, b): "undecided" for a in NOT_DECISIVE for b in VERDICTS},
}
HEADLINES = headlines()
KEY1, KEY2 = HEADLINES["E1"][0], HEADLINES["E2"][0]


def test_the_table_covers_every_pair_of_verdicts():
    assert set(TABLE) == {(a, b) for a in VERDICTS for b in VERDICTS}


@pytest.mark.parametrize(("trained", "twin"), sorted(TABLE))
def test_training_follows_the_truth_table(trained, twin):
    assert training(trained, [twin]) == TABLE[(trained, twin)]
    assert training(trained, [twin] * 3) == TABLE[(trained, twin)]  # twins that agree: as one


@pytest.mark.parametrize("trained", VERDICTS)
def test_twins_that_disagree_leave_the_class_undecided(trained):
    """One initialisation that reads the other way (or is not decisive) is enough: the class must not depend on
    which initialisation was drawn."""
    for twins in (["supported", "supported", "not_supported"], ["fail", "fail", "pass"],
                  ["supported", "inconclusive", "supported"]):
        assert training(trained, twins) == "undecided"
    assert training(trained, []) == "undecided"
    with pytest.raises(TypeError, match="sequence of verdicts"):
        training(trained, "supported")


def _records() -> tuple[list[Record], list[Record]]:
    trained = [Record("E1", "empirical", "supported", {KEY1: 1.5}, details={"model": "m"}),
               Record("E2", "empirical", "supported", {KEY2: 0.5}, details={"model": "m"})]
    twins = [Record("E1", "empirical", "not_supported", {KEY1: 0.9}),
             Record("E2", "empirical", "supported", {KEY2: 0.4})]
    return trained, twins


def test_each_record_carries_the_twin_as_a_control_that_demands_nothing():
    trained, twins = _records()
    out = attach_twin(trained, [twins], HEADLINES, seeds=[0])
    assert [r.training for r in out] == ["learned", "architectural"]
    for record, twin in zip(out, twins, strict=True):
        (control,) = record.controls
        assert (control.name, control.kind, control.verdict) == (f"{TWIN_CONTROL}, seed 0", "twin", twin.verdict)
        assert control.metrics == twin.metrics  # the twin's headline number
        assert control.behaved and f"random-init twins by seed: 0: {twin.verdict}" in record.notes
    assert enforce_controls(out[1]).verdict == "supported"  # a twin that agrees demotes nothing


def test_three_twins_give_three_controls_their_spread_and_one_class():
    trained, _ = _records()
    by_seed = [[Record("E1", "empirical", verdict, {KEY1: value})]
               for verdict, value in (("not_supported", 0.9), ("inconclusive", 1.0), ("not_supported", 0.8))]
    out = attach_twin(trained, by_seed, HEADLINES, seeds=[4, 5, 6])
    e1, e2 = out
    assert [c.name for c in e1.controls] == [f"{TWIN_CONTROL}, seed {s}" for s in (4, 5, 6)]
    assert e1.details["twins"] == {"seeds": [4, 5, 6], "verdicts": ["not_supported", "inconclusive", "not_supported"],
                                   "headline": KEY1, "values": [0.9, 1.0, 0.8], "min": 0.8, "max": 1.0}
    assert e1.training == "undecided"  # seed 5's twin is not decisive: with seeds 4 and 6 alone it was learned
    assert attach_twin(_records()[0], [by_seed[0], by_seed[2]], HEADLINES, seeds=[4, 6])[0].training == "learned"
    assert [c.verdict for c in e2.controls] == ["skipped"] * 3 and e2.training == "undecided"
    with pytest.raises(ValueError, match="as many"):
        attach_twin(_records()[0], by_seed, HEADLINES, seeds=[0])


def test_a_missing_twin_record_leaves_the_verdict_undecided():
    trained, _ = _records()
    (record, _) = attach_twin(trained, [[]], HEADLINES, seeds=[0])
    assert record.controls[0].verdict == "skipped" and record.training == "undecided"


def test_training_and_the_twin_control_survive_a_results_file(tmp_path):
    trained, twins = _records()
    out = attach_twin(trained, [twins], HEADLINES, seeds=[0])
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results_document(out, "probe")))
    again = load_records(path)
    assert [(r.training, r.controls) for r in again] == [(r.training, r.controls) for r in out]


def test_a_record_refuses_an_unknown_training_class():
    with pytest.raises(ValueError, match="training must be one of"):
        Record("E1", "empirical", "supported", training="innate")
    with pytest.raises(ValueError, match="control kind"):
        Control("x", "sibling", "pass")


def test_the_matrix_marks_an_architectural_verdict_only():
    trained, twins = _records()
    out = attach_twin(trained, [twins], HEADLINES, seeds=[0])
    matrix = build_matrix([Card(f"c{i}", "", r) for i, r in enumerate(out)], {})
    (learned,), (architectural,) = (row.cells[0] for row in matrix.rows)
    assert (learned.mark, architectural.mark) == ("", ARCHITECTURAL_MARK) and matrix.marked
    assert "random-init twins: supported" in architectural.note
    plain = build_matrix([Card("c", "", Record("E1", "empirical", "supported", details={"model": "m"}))], {})
    assert not plain.marked


def test_the_markdown_report_marks_and_separates_learned_from_architectural():
    trained, twins = _records()
    out = attach_twin(trained, [twins], HEADLINES, seeds=[0])
    text = render_markdown(results_document(out, "probe"))
    assert f"){ARCHITECTURAL_MARK} 0.5" in text and text.count(ARCHITECTURAL_MARK) >= 2  # the cell and the legend
    assert "## Learned or architectural" in text
    assert [row[:3] for row in twin_rows(out)] == [("learned", "m", "E1"), ("architectural", "m", "E2")]
    without = render_markdown(results_document(_records()[0], "probe"))
    assert ARCHITECTURAL_MARK not in without and "Learned or architectural" not in without


def test_the_training_figure_leaves_out_points_without_a_finite_value():
    from expattn.report.figures_training import training_curves, training_uri

    curve = {"a": [{"step": 10, "value": 2.0, "verdict": "supported"}, {"step": 0, "value": 1.0, "verdict": "fail"},
                   {"step": 5, "value": float("nan"), "verdict": "error"}, {"step": 7, "value": None,
                                                                           "verdict": "skipped"}],
             "b": [{"step": 0, "value": float("inf"), "verdict": "error"}]}
    record = Record("E1", "empirical", "supported", details={"curve": curve})
    assert training_curves([record]) == [("E1", {"a": [(0, 1.0, "fail"), (10, 2.0, "supported")]})]
    assert training_uri([Record("E1", "empirical", "supported")]) is None
