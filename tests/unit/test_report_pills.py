"""The report's heading: each record counted under one kind (identities, simulations, hypotheses about trained
models, self-checks), never pooled across kinds, and one sentence saying what was run and what it found."""

from __future__ import annotations

from expattn.report.pills import HYPOTHESES, IDENTITIES, SELF_CHECKS, SIMULATIONS, kind_counts, lead_sentence
from expattn.results.record import Record


def rec(claim: str, kind: str, verdict: str, stage: str | None, model: str | None = None) -> Record:
    details = {k: v for k, v in (("stage", stage), ("model", model)) if v is not None}
    return Record(id=claim, kind=kind, verdict=verdict, details=details)


RECORDS = [
    rec("A3", "identity", "pass", "verify"),
    rec("A4", "identity", "fail", "verify"),
    rec("B3", "dynamics", "pass", "simulate"),
    rec("B6", "dynamics", "not_supported", "simulate"),
    rec("E1", "empirical", "supported", "probe", "minilm"),
    rec("E1", "empirical", "not_supported", "probe", "smollm2"),
    rec("E5", "identity", "pass", "probe", "minilm"),
    rec("E2", "empirical", "inconclusive", "train"),
    rec("A5", "identity", "pass", None),  # no stage: by its catalogue kind
]


def test_each_record_counts_under_its_own_kind():
    assert kind_counts(RECORDS) == {
        IDENTITIES: {"pass": 2, "fail": 1},
        SIMULATIONS: {"pass": 1, "not_supported": 1},
        HYPOTHESES: {"supported": 1, "not_supported": 1, "inconclusive": 1},
        SELF_CHECKS: {"pass": 1},
    }
    assert sum(sum(c.values()) for c in kind_counts(RECORDS).values()) == len(RECORDS)


def test_the_lead_sentence_says_what_was_run_and_found():
    text = lead_sentence(RECORDS, ["minilm", "smollm2"])
    assert text.startswith("This report checked 3 identities, 2 simulations and 1 self-check, and measured 3 "
                           "hypotheses about trained models on minilm, smollm2: 1 supported, 1 not supported, "
                           "1 inconclusive;")
    assert lead_sentence(RECORDS[4:6], ["minilm"]).startswith("This report measured 2 hypotheses")
    assert lead_sentence([], []) == "This report holds no records."
