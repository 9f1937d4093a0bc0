"""The checks that ``verify``, ``simulate`` and ``report`` run: the check and preset modules, named one by one
(importing a module registers its checks with ``catalogue.registry.register_claim``), their selection by claim
ID or name, and running one into a ``Record``.

``run_claim`` fills in the statement, source, method and criterion (statement and source by default from the
catalogue entry), turns an exception into an ``error`` record (a crashing check is never a silent one) and
demotes a record whose controls misbehave (``enforce_controls``: a negative control that passes is a failure).
``timed_claim`` also gives the check's wall seconds, which the results files keep beside the records, not in
them: a seed's records are the same on every run.
"""

from __future__ import annotations

import time

from expattn.catalogue.registry import Claim, RunContext, registered
from expattn.checks import (
    a_discrete,
    a_families,
    a_geometry,
    b1_d1,
    b_operators,
    c_contrastive,
    d_energy,
    f_carriers,
    f_operators,
    g_theory,
)
from expattn.presets import (
    b6_continuous_carrier,
    b7_tied_block,
    b8_heads,
    b_dynamics,
    b_equilibrium,
    b_sphere_clusters,
    d2_fixed_vs_changing,
    d2_retrieval,
    d7_anderson,
    d7_implicit,
    d7_tied_weights,
)
from expattn.results.record import Record, enforce_controls, error_record

# Every module that registers checks: a new one is added here (tests/unit/test_ground_floor.py checks the list).
CHECK_MODULES = (a_discrete, a_families, a_geometry, b1_d1, b_operators, c_contrastive, d_energy, f_carriers,
                 f_operators, g_theory)
PRESET_MODULES = (b6_continuous_carrier, b7_tied_block, b8_heads, b_dynamics, b_equilibrium, b_sphere_clusters,
                  d2_fixed_vs_changing, d2_retrieval, d7_anderson, d7_implicit, d7_tied_weights)


def claims(command: str = "verify") -> list[Claim]:
    """All checks of ``command`` (``verify`` or ``simulate``) of ``CHECK_MODULES`` and ``PRESET_MODULES``, sorted
    by ID (A1, A2, ..., A10, ...), then name."""
    return registered(command)


def select(command: str, only: list[str] | None) -> list[Claim]:
    """The checks of ``command`` whose claim ID or name is in ``only`` (all if ``None``)."""
    available = claims(command)
    if not only:
        return available
    wanted = {w.lower() for w in only}
    known = {c.id.lower() for c in available} | {c.name.lower() for c in available}
    unknown = [w for w in only if w.lower() not in known]
    if unknown:
        names = sorted({c.name for c in available}, key=str)
        raise ValueError(
            f"unknown claim or preset {', '.join(unknown)} for {command}; "
            f"available: {', '.join(names)}"
        )
    return [c for c in available if c.id.lower() in wanted or c.name.lower() in wanted]


def run_claim(claim: Claim, ctx: RunContext) -> Record:
    """Run one check; fill in context; a raised exception becomes an ``error`` record (a bug or a crash of the
    check, not a verdict on the claim); misbehaving controls demote the verdict (``enforce_controls``). A simulate
    record names its preset in ``details["preset"]``, whichever command ran it (``simulate`` or ``report``)."""
    try:
        record = claim.check(ctx)
    except Exception as err:
        record = error_record(claim.id, claim.kind, "check", err)
    record.statement = record.statement or claim.statement
    record.source = record.source or claim.source
    record.method = record.method or claim.method
    record.criterion = record.criterion or claim.criterion
    if claim.command == "simulate":
        record.details.setdefault("preset", claim.name)
    return enforce_controls(record)


def timed_claim(claim: Claim, ctx: RunContext) -> tuple[Record, float]:
    """``run_claim`` and the wall seconds it took."""
    start = time.perf_counter()
    record = run_claim(claim, ctx)
    return record, time.perf_counter() - start
