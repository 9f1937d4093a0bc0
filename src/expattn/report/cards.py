"""Cards: one record placed in a report, and what every view of cards shares: their order by claim ID
(``claim_key``), a metric as text (``format_value``) and the most severe of several verdicts (``worst``).

The document view (``report.document``) and the claim x model matrix (``report.matrix``) both build on these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from expattn import catalogue
from expattn.results.record import Record

GROUPS = {g.letter: g.title for g in catalogue.GROUPS}  # group letter -> title

VERDICT_ORDER = ("error", "fail", "not_supported", "inconclusive", "skipped", "supported", "pass")


@dataclass(frozen=True)
class Card:
    """One record placed in the report: its anchor, label and the record itself."""

    anchor: str
    label: str
    record: Record


def claim_key(claim_id: str) -> tuple[str, int, str]:
    """Sort key A1 < A2 < ... < A10 < B1; unknown shapes sort after the known groups."""
    head, number = claim_id[:1].upper(), claim_id[1:]
    return (head if head in GROUPS else "~" + head, int(number) if number.isdigit() else 0, claim_id)


def format_value(value: Any) -> str:
    """A metric as short text: 4 significant digits for floats, as-is otherwise."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(format_value(v) for v in value[:8]) + (", ..." if len(value) > 8 else "") + "]"
    return str(value)


def worst(verdicts: list[str]) -> str:
    """The most severe of several verdicts (error first, then fail; pass last)."""
    return min(verdicts, key=VERDICT_ORDER.index) if verdicts else "not run"
