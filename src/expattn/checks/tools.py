"""Small helpers shared by the check modules: seeded draws and error-vs-tolerance records."""

from __future__ import annotations

import torch
from torch import Tensor

from expattn.results.record import Record


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
    draws: int | None = None,
    notes: str = "",
    **metrics: float,
) -> Record:
    """A record whose verdict is ``pass`` iff ``|error| <= tolerance``.

    ``as_printed_error`` is the same error measured for the statement as the seed prints it;
    it yields ``as_printed = "pass"`` or ``"fail"`` against the same tolerance.
    """
    as_printed = None
    if as_printed_error is not None:
        as_printed = "pass" if abs(as_printed_error) <= tolerance else "fail"
        metrics["as_printed_error"] = as_printed_error
    if draws is not None:
        metrics["draws"] = draws
    return Record(
        id=claim_id,
        kind=kind,
        verdict="pass" if abs(error) <= tolerance else "fail",
        metrics={"max_error": error, "tolerance": tolerance, **metrics},
        as_printed=as_printed,
        notes=notes,
    )
