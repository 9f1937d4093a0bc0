"""Every verdict can fail: each record's negative controls, run through its own decision rule, reject
the claim, and a record whose negative control passes is demoted."""

from __future__ import annotations

import pytest

from expattn.catalogue.registry import RunContext
from expattn.commands.checks import claims, run_claim
from expattn.results.record import Control, Record, enforce_controls, results_document

VERIFY = claims("verify")


@pytest.mark.parametrize("claim", VERIFY, ids=[c.name for c in VERIFY])
def test_verify_check_states_criterion_and_its_negative_controls_fail(claim):
    record = run_claim(claim, RunContext(seed=0, quick=True))
    assert record.verdict == "pass", record.notes
    assert record.criterion.startswith("pass iff")
    negatives = [c for c in record.controls if c.kind == "negative"]
    assert negatives, f"{claim.name} has no negative control"
    for control in negatives:
        assert control.verdict == "fail", (claim.name, control.name)
        # The wrong formula misses by far more than the tolerance: not a near-miss of round-off.
        assert control.metrics["max_error"] > 100 * control.metrics["tolerance"], (claim.name, control.name)


def test_a_negative_control_that_passes_demotes_an_exact_claim_to_fail():
    record = Record("A1", "identity", "pass", controls=[Control("wrong formula", "negative", "pass")])
    enforce_controls(record)
    assert record.verdict == "fail"
    assert "negative control 'wrong formula' gave pass" in record.notes


def test_a_negative_control_that_passes_demotes_a_hypothesis_to_inconclusive():
    record = Record("E1", "empirical", "supported", controls=[Control("shrinking update", "negative", "supported")])
    assert enforce_controls(record).verdict == "inconclusive"


def test_a_positive_control_that_fails_demotes_the_record():
    record = Record("E1", "empirical", "not_supported", controls=[Control("growing", "positive", "not_supported")])
    assert enforce_controls(record).verdict == "inconclusive"


def test_well_behaved_controls_leave_the_verdict():
    controls = [Control("wrong", "negative", "fail"), Control("right", "positive", "pass")]
    record = Record("A1", "identity", "pass", controls=controls)
    assert enforce_controls(record).verdict == "pass"
    assert record.notes == ""


def test_controls_round_trip_through_the_results_document():
    record = Record("A1", "identity", "pass", criterion="error <= 1e-12",
                    controls=[Control("wrong", "negative", "fail", {"max_error": 0.5})])
    doc = results_document([record], "verify")
    again = Record(**{k: v for k, v in doc["records"][0].items()})
    assert again.controls == record.controls
    assert again.criterion == "error <= 1e-12"


def test_a_control_of_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="control kind must be one of"):
        Control("x", "neutral", "fail")


def test_report_cards_show_the_criterion_and_each_control():
    from expattn.report.html import render_html
    from expattn.report.markdown import render_markdown

    record = Record("A1", "identity", "pass", criterion="pass iff error <= 1e-12",
                    controls=[Control("weights left out", "negative", "fail", {"max_error": 0.44})])
    doc = results_document([record], "verify")
    for text in (render_markdown(doc), render_html(doc, None)):
        assert "pass iff error &lt;= 1e-12" in text or "pass iff error <= 1e-12" in text
        assert "weights left out" in text
        assert "max_error = 0.44" in text.replace("\\_", "_")
