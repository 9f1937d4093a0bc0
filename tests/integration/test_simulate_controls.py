"""Every simulate preset can fail: its stated rule, and its negative controls, run through that rule on the
preset's quick run, reject the claim (the runs: integration tier; the rule's demotion itself is unit-tested in
``tests/unit/test_controls.py``)."""

from __future__ import annotations

import pytest

from expattn.commands.checks import claims

SIMULATE = claims("simulate")


@pytest.mark.parametrize("claim", SIMULATE, ids=[c.name for c in SIMULATE])
def test_every_simulate_preset_states_its_criterion_and_its_controls_behave(quick_record, claim):
    """A preset without a stated rule, without a negative control, or whose controls misbehave fails here."""
    record = quick_record(claim.name)  # one quick run per preset, shared with the other files that judge it
    assert record.criterion.split(" iff ")[0] in ("pass", "supported"), record.criterion
    negatives = [c for c in record.controls if c.kind == "negative"]
    assert negatives, f"{claim.name} has no negative control"
    assert all(c.verdict in ("fail", "not_supported") for c in negatives), record.controls
    assert all(c.behaved for c in record.controls), record.controls
    assert "demoted" not in record.notes, record.notes
