"""Registry of the checks of the catalogue's claims: claim ID -> check function, as data.

Check modules live in ``expattn.checks``; each decorates its functions with ``register_claim``,
naming a claim ID of ``expattn.catalogue`` (``expattn.presets`` register ``Preset`` instances through it,
with ``register_preset``). A
check takes a ``RunContext`` (seed, output folder for plots, quick flag) and returns a
``Record``. This module only holds what was registered: the command layer imports the check
modules by name and runs them (``expattn.commands.checks``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from expattn.catalogue import entry
from expattn.results.record import Record

COMMANDS = ("verify", "simulate")


@dataclass(frozen=True)
class RunContext:
    """What every check receives.

    Attributes:
        seed: seed of all random draws of the check.
        out_dir: folder for plots (``None``: draw none, e.g. under ``verify``).
        quick: smaller sizes for smoke runs (``report --quick``, tests).
        dtype: the dtype the probe stage loads its models in (``report --dtype``; None: float32).
    """

    seed: int = 0
    out_dir: Path | None = None
    quick: bool = False
    dtype: str | None = None


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


def _id_key(claim: Claim) -> tuple[str, int, str]:
    number = claim.id[1:]
    return claim.id[0], int(number) if number.isdigit() else 0, claim.name


def registered(command: str = "verify") -> list[Claim]:
    """The checks of ``command`` registered so far, sorted by ID (A1, A2, ..., A10, ...), then name. Which modules
    are imported, and so registered, is the command layer's choice (``expattn.commands.checks``)."""
    return sorted((c for c in _REGISTRY.values() if c.command == command), key=_id_key)
