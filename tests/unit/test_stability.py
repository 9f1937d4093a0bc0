"""Verdicts side by side across seeds: a changed verdict, a changed control and a missing record are unstable."""

from __future__ import annotations

import pytest

from expattn.results.record import Control, Record
from expattn.results.stability import markdown, verdict_rows


def _records(b5: str, control: str, with_e1: bool = True) -> list[Record]:
    out = [
        Record("A1", "identity", "pass", details={"stage": "verify"}),
        Record("B5", "identity+dynamics", b5, details={"stage": "simulate", "preset": "b5-theorem1"},
               controls=[Control("RN as printed", "negative", control)]),
    ]
    if with_e1:
        out.append(Record("E1", "empirical", "supported", details={"stage": "probe", "model": "minilm"}))
    return out


def test_identical_runs_are_stable():
    rows = verdict_rows({0: _records("pass", "fail"), 1: _records("pass", "fail")})
    assert [r.key for r in rows] == ["verify/A1", "simulate/b5-theorem1/B5",
                                     "simulate/b5-theorem1/B5 [control: RN as printed]", "probe/minilm/E1"]
    assert all(r.stable for r in rows)
    assert markdown(rows, [0, 1]) == "4 of 4 records and controls keep their verdict at seeds 0, 1; none differs.\n"


def test_a_changed_record_control_or_missing_record_is_unstable():
    rows = verdict_rows({0: _records("pass", "fail"), 1: _records("fail", "pass", with_e1=False),
                         2: _records("pass", "fail")})
    unstable = {r.key: r.verdicts for r in rows if not r.stable}
    assert unstable == {
        "simulate/b5-theorem1/B5": ("pass", "fail", "pass"),
        "simulate/b5-theorem1/B5 [control: RN as printed]": ("fail", "pass", "fail"),
        "probe/minilm/E1": ("supported", "-", "supported"),
    }
    table = markdown(rows, [0, 1, 2])
    assert table.startswith("1 of 4 records and controls keep their verdict at seeds 0, 1, 2; 3 differ:")
    assert "| simulate/b5-theorem1/B5 | pass | fail | pass |" in table


def test_bad_runs_are_refused():
    with pytest.raises(ValueError, match="at least two seeds"):
        verdict_rows({0: _records("pass", "fail")})
    twice = [*_records("pass", "fail"), Record("A1", "identity", "fail", details={"stage": "verify"})]
    with pytest.raises(ValueError, match="'verify/A1' twice"):
        verdict_rows({0: twice, 1: twice})
