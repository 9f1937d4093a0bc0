"""Registry of the claims in shared/CLAIMS.md: claim ID -> check function -> ``Record``.

Check modules live in ``expattn.checks``; each decorates its functions with
``register_claim``. A check takes a seed and returns a ``Record``; the runner fills in the
claim's statement, source and method, times it, and turns an exception into a ``fail``
record (a crashing check is a failing check, never a silent one).
"""

from __future__ import annotations

import importlib
import pkgutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from expattn.report.schema import Record

COMMANDS = ("verify", "simulate", "probe")


@dataclass(frozen=True)
class Claim:
    """A claim ID with what it states, where, how it is checked, and by which command."""

    id: str
    kind: str
    statement: str
    source: str
    method: str
    command: str
    check: Callable[[int], Record]


_REGISTRY: dict[str, Claim] = {}


def register_claim(
    claim_id: str, *, kind: str, statement: str, source: str, method: str, command: str = "verify"
) -> Callable[[Callable[[int], Record]], Callable[[int], Record]]:
    """Decorator: register ``fn(seed) -> Record`` as the check of ``claim_id``."""
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")

    def decorate(fn: Callable[[int], Record]) -> Callable[[int], Record]:
        key = f"{command}:{claim_id}"
        if key in _REGISTRY:
            raise ValueError(f"claim {claim_id} already has a {command} check")
        _REGISTRY[key] = Claim(claim_id, kind, statement, source, method, command, fn)
        return fn

    return decorate


def _load_checks() -> None:
    import expattn.checks as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{info.name}")


def _id_key(claim_id: str) -> tuple[str, int]:
    return claim_id[0], int(claim_id[1:]) if claim_id[1:].isdigit() else 0


def claims(command: str = "verify") -> list[Claim]:
    """All registered claims of ``command``, sorted by ID (A1, A2, ..., A10, ...)."""
    _load_checks()
    found = [c for c in _REGISTRY.values() if c.command == command]
    return sorted(found, key=lambda c: _id_key(c.id))


def select(command: str, only: list[str] | None) -> list[Claim]:
    """The claims of ``command`` whose IDs are in ``only`` (all if ``None``)."""
    available = claims(command)
    if not only:
        return available
    known = {c.id for c in available}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise ValueError(
            f"unknown claim ID(s) {', '.join(unknown)} for {command}; "
            f"available: {', '.join(c.id for c in available)}"
        )
    return [c for c in available if c.id in only]


def run_claim(claim: Claim, seed: int) -> Record:
    """Run one check; fill in context; a raised exception becomes a ``fail`` record."""
    start = time.perf_counter()
    try:
        record = claim.check(seed)
    except Exception as err:  # noqa: BLE001 - reported, not swallowed
        record = Record(
            id=claim.id,
            kind=claim.kind,
            verdict="fail",
            notes=f"check raised {type(err).__name__}: {err}",
            details={"traceback": traceback.format_exc(limit=5)},
        )
    record.statement = record.statement or claim.statement
    record.source = record.source or claim.source
    record.method = record.method or claim.method
    record.metrics.setdefault("seconds", time.perf_counter() - start)
    return record
