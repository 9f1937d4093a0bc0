"""The claim catalogue: every claim ID with its statement, seed location and where it is checked.

``ENTRIES`` lists the claims A1..G6 in order (one module per group: ``a_families``,
``b_dynamics``, ``c_contrastive``, ``d_energy``, ``e_trained``, ``f_audit``, ``g_theory``); ``entry(id)`` looks one up,
``ids()`` lists them, ``GROUPS`` names the groups. Adding a claim is adding one ``Entry`` to its
group's module; the checks, the probe, the report and ``expattn claims`` read it from here.
``docs/CLAIMS.md`` is generated from it (``expattn claims --markdown``).
"""

from __future__ import annotations

from expattn.catalogue import a_families, b_dynamics, c_contrastive, d_energy, e_trained, f_audit, g_theory
from expattn.catalogue.entry import AS_PRINTED_KINDS, Curve, Entry, Group, HeadMap

_MODULES = (a_families, b_dynamics, c_contrastive, d_energy, e_trained, f_audit, g_theory)
GROUPS: tuple[Group, ...] = tuple(m.GROUP for m in _MODULES)
ENTRIES: tuple[Entry, ...] = tuple(e for m in _MODULES for e in m.ENTRIES)

_BY_ID = {e.id: e for e in ENTRIES}
if len(_BY_ID) != len(ENTRIES):
    raise ValueError(f"the catalogue lists {sorted(i for i in _BY_ID if sum(e.id == i for e in ENTRIES) > 1)} twice")
_MISPLACED = [e.id for m in _MODULES for e in m.ENTRIES if e.group != m.GROUP.letter]
if _MISPLACED:
    raise ValueError(f"entries {_MISPLACED} sit in another group's module")


def ids() -> tuple[str, ...]:
    """Every claim ID in catalogue order (A1, ..., A11, B1, ..., E8)."""
    return tuple(_BY_ID)


def entry(claim_id: str) -> Entry:
    """The catalogue entry of ``claim_id`` (case-insensitive); ``ValueError`` if there is none."""
    if not isinstance(claim_id, str):
        raise TypeError(f"claim_id must be a string such as 'E4', got {type(claim_id).__name__}")
    found = _BY_ID.get(claim_id.strip().upper())
    if found is None:
        members = [[e.id for e in ENTRIES if e.group == g.letter] for g in GROUPS]
        spans = ", ".join(f"{m[0]}-{m[-1]}" if len(m) > 1 else m[0] for m in members if m)
        raise ValueError(f"unknown claim ID {claim_id!r}; the catalogue has {spans}")
    return found


__all__ = ["AS_PRINTED_KINDS", "ENTRIES", "GROUPS", "Curve", "Entry", "Group", "HeadMap", "entry", "ids"]


def headlines() -> dict[str, tuple[str, str]]:
    """Hypothesis ID -> ``(metric key of its record, what it is)``: each probed claim's headline number."""
    return {e.id: e.headline for e in ENTRIES if e.headline is not None}


def curves() -> dict[str, Curve]:
    """Hypothesis ID -> how the report's summary figure draws it per layer."""
    return {e.id: e.curve for e in ENTRIES if e.curve is not None}


def head_maps() -> dict[str, HeadMap]:
    """Hypothesis ID -> the report's per-head map of it."""
    return {e.id: e.head_map for e in ENTRIES if e.head_map is not None}
