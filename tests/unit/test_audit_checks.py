"""Checks of the audit's findings (group F) and of the theory no other group covered (group G): each
passes; its printed form and negative controls fail by a wide margin."""

from __future__ import annotations

import pytest

from expattn.catalogue import entry
from expattn.catalogue.registry import RunContext
from expattn.commands.checks import claims, run_claim

IDS = tuple(f"F{i}" for i in range(1, 16)) + tuple(f"G{i}" for i in range(1, 7))
CHECKS = {c.id: c for c in claims("verify") if c.id in IDS}


def test_every_id_has_a_check():
    assert sorted(CHECKS) == sorted(IDS)


@pytest.mark.parametrize("claim_id", IDS)
@pytest.mark.parametrize("quick", [True, False])
def test_check_passes_and_its_negative_controls_fail(claim_id, quick):
    record = run_claim(CHECKS[claim_id], RunContext(seed=3, quick=quick))
    assert record.verdict == "pass", record.notes
    assert record.metrics["max_error"] <= record.metrics["tolerance"]
    negatives = [c for c in record.controls if c.kind == "negative"]
    assert negatives and all(c.verdict == "fail" for c in negatives)
    assert all(c.metrics["max_error"] > 100 * c.metrics["tolerance"] for c in negatives)
    assert all(c.verdict == "pass" for c in record.controls if c.kind == "positive")
    printed = entry(claim_id).as_printed is not None
    assert (record.as_printed == "fail") if printed else record.as_printed is None
