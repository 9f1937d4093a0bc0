"""The probe's progress by stage: what each kind of callback hears and what the bar says."""

from __future__ import annotations

import pytest

from expattn.commands.probe import stage_line
from expattn.probes.progress import Stage, reporter

RUN = [Stage("loading", 0, 1), Stage("feeding", 0, 64, ("E1", "E5")), Stage("feeding", 64, 64, ("E1", "E5")),
       Stage("analyses", 0, 2, ("E1",)), Stage("analyses", 1, 2, ("E5",)), Stage("analyses", 2, 2)]


def test_a_two_argument_callback_hears_the_tokens_only():
    heard = []
    report = reporter(lambda done, total: heard.append((done, total)))
    for stage in RUN:
        report(stage)
    assert heard == [(0, 64), (64, 64)]


def test_a_stage_aware_callback_hears_every_stage_in_order():
    heard = []

    def progress(done, total, stage):
        heard.append((done, total, stage))

    report = reporter(progress)
    for stage in RUN:
        report(stage)
    assert heard == [(s.done, s.total, s) for s in RUN]
    reporter(None)(RUN[0])  # no callback: nothing to call


def test_each_stage_names_itself():
    assert [str(s) for s in RUN] == [
        "loading the model", "feeding (E1,E5 updates) 0/64 tokens", "feeding (E1,E5 updates) 64/64 tokens",
        "analysing E1 (1 of 2)", "analysing E5 (2 of 2)", "analyses done (2 of 2)"]
    assert stage_line(RUN[2], 2.0) == "feeding (E1,E5 updates) 64/64 tokens, 32 tokens/s"
    assert stage_line(RUN[3], 2.0) == "analysing E1 (1 of 2)"
    assert str(Stage("analyses", 0, 2, ("E1", "E5"))) == "analysing E1,E5 two at a time (0 of 2 done)"
    with pytest.raises(ValueError, match="stage name must be one of loading, feeding, analyses, got 'load'"):
        Stage("load", 0, 1)
