"""Verdicts of one job at several seeds, side by side: which records (and controls) keep their verdict.

A record is keyed by where it comes from and what it checks: ``(stage, model, preset or name, claim ID)``
(the same claim may be checked by several stages or models). A control is keyed by its record's key and its
name. A key whose verdict differs between seeds, or that is missing at some seeds, is **unstable**: the verdict
then rests on the draw, and the table says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from expattn.results.record import Record

MISSING = "-"


def record_key(record: Record) -> str:
    """``stage/model/preset/ID`` of a record, the parts it has (``verify/A3``, ``probe/minilm/E5``)."""
    d = record.details
    parts = [d.get("stage"), d.get("model"), d.get("preset") or d.get("name"), record.id]
    return "/".join(str(p) for p in parts if p)


@dataclass(frozen=True)
class VerdictRow:
    """One record or control: its key and its verdict at each seed (``MISSING`` where absent)."""

    key: str
    verdicts: tuple[str, ...]

    @property
    def stable(self) -> bool:
        """True iff every seed gave the same verdict."""
        return len(set(self.verdicts)) == 1 and MISSING not in self.verdicts


def verdict_rows(runs: Mapping[int, list[Record]]) -> list[VerdictRow]:
    """Rows of ``key -> verdict per seed`` for the records and their controls of ``runs`` (seed -> records), in
    the first seed's order, then keys that appear only later.

    Raises:
        ValueError: fewer than two seeds, or one run holds the same key twice.
    """
    if len(runs) < 2:
        raise ValueError(f"runs must hold at least two seeds, got {len(runs)}")
    tables: dict[int, dict[str, str]] = {}
    for seed, records in runs.items():
        table: dict[str, str] = {}
        for r in records:
            key = record_key(r)
            entries = [(key, r.verdict)] + [(f"{key} [control: {c.name}]", c.verdict) for c in r.controls]
            for k, v in entries:
                if k in table:
                    raise ValueError(f"seed {seed} holds {k!r} twice; records must be keyed uniquely")
                table[k] = v
        tables[seed] = table
    keys = list(dict.fromkeys(k for table in tables.values() for k in table))
    return [VerdictRow(k, tuple(tables[s].get(k, MISSING) for s in runs)) for k in keys]


def markdown(rows: list[VerdictRow], seeds: list[int]) -> str:
    """The unstable rows in full and a count of the stable ones, as a Markdown table."""
    unstable = [r for r in rows if not r.stable]
    head = f"{len(rows) - len(unstable)} of {len(rows)} records and controls keep their verdict at seeds " + ", ".join(
        map(str, seeds)
    )
    if not unstable:
        return head + "; none differs.\n"
    lines = [head + f"; {len(unstable)} differ:", "", "| record | " + " | ".join(f"seed {s}" for s in seeds) + " |",
             "|---|" + "---|" * len(seeds)]
    lines += [f"| {r.key} | " + " | ".join(r.verdicts) + " |" for r in unstable]
    return "\n".join(lines) + "\n"
