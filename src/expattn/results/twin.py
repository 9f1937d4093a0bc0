"""A trained model beside its random-init twin: which verdicts training decides.

A verdict that a random model of the same architecture (the same class and config, its own initialisation under a
fixed seed) also earns is a property of the architecture and the initialisation, not a finding about trained
transformers. The probe measures several twins, one per initialisation seed, on the same token ids as the trained
model (``expattn.probes.models.twin``); each record of the trained model then carries every twin's verdict and
headline number as ``twin`` controls (which demand no verdict: ``Control.behaved``), their spread in
``details["twins"]``, and a classification in ``Record.training``, by a rule fixed before looking at any data
(``TRAINING_RULE``):

- a verdict is *decisive* when it accepts the claim (``pass``, ``supported``) or rejects it (``fail``,
  ``not_supported``); ``inconclusive``, ``skipped`` and ``error`` are not;
- ``learned``: the trained verdict and every twin's are decisive, and every twin's differs from the trained one:
  training turned the verdict (either way: a trained ``not_supported`` whose twins are ``supported`` is training's
  doing too);
- ``architectural``: the trained verdict and every twin's are decisive and equal: each twin earns the same verdict;
- ``undecided``: otherwise (a verdict that is not decisive, or twins that disagree among themselves: then the
  class would depend on the initialisation that happened to be drawn).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from expattn.results.record import FAILING, PASSING, Control, Record

TWIN_CONTROL = "random-init twin"
TWIN_INITS = 3  # twins per model by default: with fewer, one initialisation that reads the other way goes unseen
TRAINING_RULE = (
    "training: learned when the trained model's verdict and every random-init twin's (same class and config, one "
    "twin per initialisation seed, same token ids) are decisive (pass/supported or fail/not_supported) and every "
    "twin's differs from the trained one, architectural when all are decisive and equal, undecided otherwise"
)


def decisive(verdict: str) -> bool:
    """True when ``verdict`` accepts or rejects the claim (``PASSING`` or ``FAILING``)."""
    return verdict in PASSING or verdict in FAILING


def training(trained: str, twins: Sequence[str]) -> str:
    """The classification of a trained model's verdict beside its twins' verdicts (module docstring's rule).

    >>> training("supported", ["not_supported"] * 3), training("pass", ["pass", "pass"]), training("pass", [])
    ('learned', 'architectural', 'undecided')
    >>> training("supported", ["not_supported", "supported", "not_supported"])
    'undecided'
    """
    if isinstance(twins, str):
        raise TypeError("twins must be a sequence of verdicts, one per twin")
    if not twins or not all(decisive(v) for v in (trained, *twins)):
        return "undecided"
    same = [(v in PASSING) == (trained in PASSING) for v in twins]
    return "architectural" if all(same) else "learned" if not any(same) else "undecided"


def twin_control(twin: Record | None, headline: str | None, seed: int) -> Control:
    """The twin of initialisation ``seed`` as a ``twin`` control of the trained record, with its headline number when
    it has one (``headline``: the metric key, ``catalogue.headlines``); ``skipped`` when the twin has no such
    record."""
    name = f"{TWIN_CONTROL}, seed {seed}"
    if twin is None:
        return Control(name, "twin", "skipped")
    value = twin.metrics.get(headline) if headline is not None else None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return Control(name, "twin", twin.verdict, {headline: value} if number else {})


def spread(controls: Sequence[Control], headline: str | None, seeds: Sequence[int]) -> dict:
    """``details["twins"]`` of a record: the twins' seeds and verdicts in order, and their headline numbers with
    the smallest and largest (``None`` where no twin has one)."""
    values = [c.metrics.get(headline) for c in controls]
    numbers = [v for v in values if v is not None]
    return {"seeds": list(seeds), "verdicts": [c.verdict for c in controls], "headline": headline,
            "values": values, "min": min(numbers, default=None), "max": max(numbers, default=None)}


def attach_twin(records: Sequence[Record], twins: Sequence[Sequence[Record]],
                headlines: Mapping[str, tuple[str, str]], seeds: Sequence[int]) -> list[Record]:
    """``records`` (of the trained model), each with one control per twin, the twins' spread, its ``training``
    classification and a note saying them; ``twins``: the records of each twin (matched by claim ID), in the order
    of ``seeds``, their initialisation seeds. The records are changed in place and returned."""
    if len(twins) != len(seeds):
        raise ValueError(f"twins and seeds must be as many, got {len(twins)} and {len(seeds)}")
    by_id = [{r.id: r for r in records_of} for records_of in twins]
    for record in records:
        headline = headlines.get(record.id, (None, ""))[0]
        found = [each.get(record.id) for each in by_id]
        controls = [twin_control(twin, headline, seed) for twin, seed in zip(found, seeds, strict=True)]
        record.controls += controls
        record.details["twins"] = spread(controls, headline, seeds)
        record.training = training(record.verdict, [c.verdict for c in controls])
        said = "; ".join(_said(c, seed) for c, seed in zip(controls, seeds, strict=True))
        why = "".join(f"; twin {seed}: {twin.notes}" for twin, seed in zip(found, seeds, strict=True)
                      if twin is not None and twin.verdict == "error")
        note = (f"training: {record.training} (random-init twins by seed: {said}{why}). Rule: {TRAINING_RULE}.")
        record.notes = f"{record.notes} {note}".strip()
    return list(records)


def _said(control: Control, seed: int) -> str:
    shown = ", ".join(f"{k} = {v:.4g}" for k, v in control.metrics.items())
    return f"{seed}: {control.verdict}" + (f" ({shown})" if shown else "")
