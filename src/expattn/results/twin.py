"""A trained model beside its random-init twin: which verdicts training decides.

A verdict that a random model of the same architecture (the same class and config, its own initialisation under a
fixed seed) also earns is a property of the architecture and the initialisation, not a finding about trained
transformers. The probe measures the twin on the same token ids as the trained model
(``expattn.probes.models.twin``); each record of the trained model then carries the twin's verdict and headline
number as a ``twin`` control (which demands no verdict: ``Control.behaved``) and a classification in
``Record.training``, by a rule fixed before looking at any data (``TRAINING_RULE``):

- a verdict is *decisive* when it accepts the claim (``pass``, ``supported``) or rejects it (``fail``,
  ``not_supported``); ``inconclusive``, ``skipped`` and ``error`` are not;
- ``learned``: both verdicts decisive and they differ: training turned the verdict (either way: a trained
  ``not_supported`` whose twin is ``supported`` is training's doing too);
- ``architectural``: both verdicts decisive and equal: the twin earns the same verdict;
- ``undecided``: either verdict is not decisive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from expattn.results.record import FAILING, PASSING, Control, Record

TWIN_CONTROL = "random-init twin"
TRAINING_RULE = (
    "training: learned when the trained model's verdict and its random-init twin's (same class and config, seeded "
    "initialisation, same token ids) are both decisive (pass/supported or fail/not_supported) and differ, "
    "architectural when both are decisive and equal, undecided otherwise"
)


def decisive(verdict: str) -> bool:
    """True when ``verdict`` accepts or rejects the claim (``PASSING`` or ``FAILING``)."""
    return verdict in PASSING or verdict in FAILING


def training(trained: str, twin: str) -> str:
    """The classification of a trained model's verdict beside its twin's (module docstring's rule).

    >>> training("supported", "not_supported"), training("pass", "pass"), training("supported", "inconclusive")
    ('learned', 'architectural', 'undecided')
    """
    if not (decisive(trained) and decisive(twin)):
        return "undecided"
    accepts = trained in PASSING
    return "architectural" if accepts == (twin in PASSING) else "learned"


def twin_control(twin: Record | None, headline: str | None) -> Control:
    """The twin's verdict as a ``twin`` control of the trained record, with its headline number when it has one
    (``headline``: the metric key, ``catalogue.headlines``); ``skipped`` when the twin has no such record."""
    if twin is None:
        return Control(TWIN_CONTROL, "twin", "skipped")
    value = twin.metrics.get(headline) if headline is not None else None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return Control(TWIN_CONTROL, "twin", twin.verdict, {headline: value} if number else {})


def attach_twin(records: Sequence[Record], twins: Sequence[Record], headlines: Mapping[str, tuple[str, str]],
                seed: int) -> list[Record]:
    """``records`` (of the trained model), each with its twin's control, its ``training`` classification and a note
    saying both; ``twins``: the records of the twin, matched by claim ID; ``seed``: the twin's initialisation seed.
    The records are changed in place and returned."""
    by_id = {r.id: r for r in twins}
    for record in records:
        twin = by_id.get(record.id)
        control = twin_control(twin, headlines.get(record.id, (None, ""))[0])
        record.controls.append(control)
        record.training = training(record.verdict, control.verdict)
        shown = ", ".join(f"{k} = {v:.4g}" for k, v in control.metrics.items())
        why = f"; {twin.notes}" if twin is not None and twin.verdict == "error" else ""
        note = (f"training: {record.training} (random-init twin, seed {seed}: {control.verdict}"
                f"{'; ' + shown if shown else ''}{why}). Rule: {TRAINING_RULE}.")
        record.notes = f"{record.notes} {note}".strip()
    return list(records)
