"""Small helpers shared by the check modules: seeded draws and error-vs-tolerance records with their
negative controls."""

from __future__ import annotations

import torch
from torch import Tensor

from expattn.results.record import Control, Record


def generator(seed: int) -> torch.Generator:
    """A fresh CPU generator: every check draws its own inputs from its own seed."""
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> Tensor:
    """Standard normal float64 draws times ``scale``."""
    return scale * torch.randn(*shape, generator=gen, dtype=torch.float64)


def max_abs(a: Tensor, b: Tensor) -> float:
    """Largest absolute difference; raises if either side is not finite."""
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("a compared quantity is not finite")
    return (a - b).abs().max().item()


def compare(
    claim_id: str,
    kind: str,
    error: float,
    tolerance: float,
    *,
    as_printed_error: float | None = None,
    negatives: dict[str, float] | None = None,
    measure: str = "largest absolute error over the draws",
    draws: int | None = None,
    notes: str = "",
    **metrics: float,
) -> Record:
    """A record whose verdict is ``pass`` iff ``|error| <= tolerance``, with its negative controls.

    ``as_printed_error`` is the same error measured for the statement as the seed prints it;
    it yields ``as_printed = "pass"`` or ``"fail"`` against the same tolerance and is a negative
    control (``"as printed"``). ``negatives`` maps the name of a wrong formula to its error, measured
    by the same code on the same draws: each becomes a negative control judged by the same rule,
    which must come out ``fail``. ``measure`` names ``error`` in the criterion.
    """
    as_printed = None
    errors = dict(negatives or {})
    if as_printed_error is not None:
        as_printed = "pass" if abs(as_printed_error) <= tolerance else "fail"
        metrics["as_printed_error"] = as_printed_error
        errors = {"as printed": as_printed_error, **errors}
    controls = [
        Control(name, "negative", "pass" if abs(e) <= tolerance else "fail", {"max_error": e, "tolerance": tolerance})
        for name, e in errors.items()
    ]
    if draws is not None:
        metrics["draws"] = draws
    return Record(
        id=claim_id,
        kind=kind,
        verdict="pass" if abs(error) <= tolerance else "fail",
        metrics={"max_error": error, "tolerance": tolerance, **metrics},
        as_printed=as_printed,
        notes=notes,
        criterion=f"pass iff the {measure} is <= {tolerance:g}; each wrong formula, run through the same "
        "comparison, must exceed it",
        controls=controls,
    )
