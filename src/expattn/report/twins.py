"""Learned or architectural: the probed models' verdicts beside their random-init twins' (``results.twin``).

One table per report: every probe record measured beside its twins, grouped by what training did to its verdict
(``learned`` first, then ``architectural``, then ``undecided``), with the trained model's verdict and headline
number beside each twin's, in the order of their initialisation seeds. A report without twins has no such table.
"""

from __future__ import annotations

from collections.abc import Sequence

from expattn.catalogue import headlines
from expattn.report.cards import claim_key, format_value
from expattn.results.record import TRAINING, Record
from expattn.results.twin import TRAINING_RULE

TRAINING_MEANING = {
    "learned": "training changed the verdict: the trained model's and its twin's are both decisive and differ",
    "architectural": "every random-init twin earns the same verdict: a property of the architecture and its "
                     "initialisation",
    "undecided": "a verdict is not decisive (inconclusive, skipped, error), or the twins disagree among themselves",
}


def twin_rows(records: Sequence[Record]) -> list[tuple[str, str, str, str, str, str]]:
    """Per probe record with twins: (training, model, claim ID, trained verdict and headline, the twins' verdicts
    and headlines by seed, headline metric), ordered by training class (``TRAINING``), model, then claim."""
    keys = headlines()
    rows = []
    for r in records:
        if r.training is None:
            continue
        key = keys.get(r.id, ("", ""))[0]
        twins = "; ".join(_said(c.verdict, c.metrics.get(key)) for c in r.controls if c.kind == "twin")
        rows.append((r.training, str(r.details.get("model", "")), r.id, _said(r.verdict, r.metrics.get(key)),
                     twins or "none", key))
    order = {name: i for i, name in enumerate(TRAINING)}
    return sorted(rows, key=lambda row: (order[row[0]], row[1], claim_key(row[2])))


def _said(verdict: str, value: object) -> str:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{verdict} ({format_value(value)})" if number else verdict


def twin_section(records: Sequence[Record], md) -> list[str]:
    """The Markdown section "Learned or architectural" (``md`` escapes a cell); ``[]`` when no record has a twin."""
    rows = twin_rows(records)
    if not rows:
        return []
    meaning = "; ".join(f"**{name}**: {md(text)}" for name, text in TRAINING_MEANING.items())
    counts = ", ".join(f"{sum(r[0] == name for r in rows)} {name}" for name in TRAINING)
    lines = ["## Learned or architectural", "",
             f"Each probed model beside its random-init twins ({counts}). {md(TRAINING_RULE)}. {meaning}.", "",
             "| training | model | ID | trained: verdict (headline) | twins by seed: verdict (headline) | headline |",
             "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(md(cell) for cell in row) + " |" for row in rows]
    return [*lines, ""]
