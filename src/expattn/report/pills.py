"""The report's heading: verdict counts split by what was run, and one sentence saying what the page holds.

A record belongs to one kind (``record_kind``), read from the stage that wrote it and its catalogue kind:

- ``identities``: exact identities and inequalities checked numerically (``expattn verify``);
- ``simulations``: dynamics on point clouds and distributions (``expattn simulate``);
- ``hypotheses about trained models``: the empirical hypotheses measured on models (probe, training sweeps);
- ``self-checks``: a probe's exact identity checked on the model itself (E5: attention is the gradient of log Z),
  which says the probe measured what it claims, not what the model does.

The counts of one kind never mix with another's: a pass of ``verify`` and a ``supported`` hypothesis are different
kinds of evidence.
"""

from __future__ import annotations

from collections.abc import Sequence

from expattn.results.record import Record

IDENTITIES = "identities"
SIMULATIONS = "simulations"
HYPOTHESES = "hypotheses about trained models"
SELF_CHECKS = "self-checks"
KINDS = (IDENTITIES, SIMULATIONS, HYPOTHESES, SELF_CHECKS)
SINGULAR = {IDENTITIES: "identity", SIMULATIONS: "simulation", SELF_CHECKS: "self-check"}
# Verdicts in the order a count lists them: evidence first, then what did not run or broke.
VERDICT_ORDER = ("pass", "supported", "not_supported", "inconclusive", "skipped", "fail", "error")


def record_kind(record: Record) -> str:
    """The kind (one of ``KINDS``) of a record: by the stage that wrote it, else by its catalogue kind."""
    stage = record.details.get("stage")
    empirical = "empirical" in record.kind
    if stage == "probe":
        return HYPOTHESES if empirical else SELF_CHECKS
    if stage == "train":
        return HYPOTHESES
    if stage == "simulate":
        return SIMULATIONS
    if stage == "verify":
        return IDENTITIES
    if empirical:
        return HYPOTHESES
    return SIMULATIONS if "dynamics" in record.kind else IDENTITIES


def kind_counts(records: Sequence[Record]) -> dict[str, dict[str, int]]:
    """Kind -> verdict -> number of records, kinds in ``KINDS`` order (kinds without records left out), verdicts in
    ``VERDICT_ORDER`` (any other verdict after them)."""
    found: dict[str, dict[str, int]] = {}
    for record in records:
        counts = found.setdefault(record_kind(record), {})
        counts[record.verdict] = counts.get(record.verdict, 0) + 1
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    return {
        kind: dict(sorted(found[kind].items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))
        for kind in KINDS
        if kind in found
    }


def _spoken(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {verdict.replace('_', ' ')}" for verdict, n in counts.items())


def _joined(items: Sequence[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def lead_sentence(records: Sequence[Record], models: Sequence[str]) -> str:
    """One sentence: what was run (how many records of each kind, on which models) and what the hypotheses found."""
    counts = kind_counts(records)
    if not counts:
        return "This report holds no records."
    checked = [f"{n} {kind if n != 1 else SINGULAR[kind]}" for kind, c in counts.items()
               if kind != HYPOTHESES for n in (sum(c.values()),)]
    parts = [f"checked {_joined(checked)}"] if checked else []
    found = counts.get(HYPOTHESES)
    if found:
        on = f" on {', '.join(models)}" if models else ""
        parts.append(f"measured {sum(found.values())} {HYPOTHESES}{on}: {_spoken(found)}; each model's verdicts are "
                     "below, each linked to its record (criterion, numbers, negative control)")
    return f"This report {', and '.join(parts)}."
