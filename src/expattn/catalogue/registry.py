"""Registry of the checks of the catalogue's claims: claim ID -> check function -> ``Record``.

Check modules live in ``expattn.checks`` (and ``expattn.presets`` register the same way); each
decorates its functions with ``register_claim``, naming a claim ID of ``expattn.catalogue``. A
check takes a ``RunContext`` (seed, output folder for plots, quick flag) and returns a
``Record``; the runner fills in the statement, source, method and criterion (statement and source
by default from the catalogue entry), turns an exception into an ``error`` record (a crashing
check is never a silent one) and demotes a record whose controls misbehave (``enforce_controls``:
a negative control that passes is a failure). ``timed_claim`` also gives the check's wall seconds,
which the results files keep beside the records, not in them: a seed's records are the same on
every run.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from expattn.catalogue import entry
from expattn.results.record import Record, enforce_controls, error_record

COMMANDS = ("verify", "simulate")


@dataclass(frozen=True)
class RunContext:
    """What every check receives.

    Attributes:
        seed: seed of all random draws of the check.
        out_dir: folder for plots (``None``: draw none, e.g. under ``verify``).
        quick: smaller sizes for smoke runs (``report --quick``, tests).
    """

    seed: int = 0
    out_dir: Path | None = None
    quick: bool = False


@dataclass(frozen=True)
class Claim:
    """A check of one claim ID: what it states, where, how, under which command and name.

    ``name`` is the claim ID for verify; simulate presets have their own names (several
    presets may check one claim ID).
    """

    id: str
    name: str
    kind: str
    statement: str
    source: str
    method: str
    command: str
    check: Callable[[RunContext], Record]
    criterion: str = ""


_REGISTRY: dict[str, Claim] = {}


def register_claim(
    claim_id: str,
    *,
    method: str,
    kind: str | None = None,
    statement: str | None = None,
    source: str | None = None,
    command: str = "verify",
    name: str | None = None,
    criterion: str = "",
) -> Callable[[Callable[[RunContext], Record]], Callable[[RunContext], Record]]:
    """Decorator: register ``fn(ctx) -> Record`` as a ``command`` check of ``claim_id``.

    ``claim_id`` must be in the catalogue. ``kind``, ``statement`` and ``source`` default to the
    catalogue entry's kind, statement and seed location; a check gives its own where it covers a
    narrower part of the claim (a verify check of one inequality of a dynamics claim).
    ``criterion`` is its decision rule, used where the record states none.
    """
    if command not in COMMANDS:
        raise ValueError(f"command must be one of {COMMANDS}, got {command!r}")
    known = entry(claim_id)
    claim_id, name = known.id, name or known.id
    kind, statement, source = kind or known.kind, statement or known.statement, source or known.seeds

    def decorate(fn: Callable[[RunContext], Record]) -> Callable[[RunContext], Record]:
        key = f"{command}:{name}"
        if key in _REGISTRY:
            raise ValueError(f"{command} already has a check named {name}")
        _REGISTRY[key] = Claim(claim_id, name, kind, statement, source, method, command, fn, criterion)
        return fn

    return decorate


CHECK_PACKAGES = ("expattn.checks", "expattn.presets")


def _load_checks() -> None:
    for package in CHECK_PACKAGES:
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            importlib.import_module(f"{package}.{info.name}")


def _id_key(claim: Claim) -> tuple[str, int, str]:
    number = claim.id[1:]
    return claim.id[0], int(number) if number.isdigit() else 0, claim.name


def claims(command: str = "verify") -> list[Claim]:
    """All registered checks of ``command``, sorted by ID (A1, A2, ..., A10, ...), then name."""
    _load_checks()
    return sorted((c for c in _REGISTRY.values() if c.command == command), key=_id_key)


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
