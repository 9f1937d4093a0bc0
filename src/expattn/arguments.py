"""Checks of scalar arguments shared by every layer: each raises ``ValueError`` naming the argument.

Tensor arguments are checked by ``expattn.core.validate``; these are the plain numbers of configs
and constructors (sizes, counts, inverse temperatures, penalties).
"""

from __future__ import annotations

import math


def positive_int(name: str, value: object) -> int:
    """``value`` if it is an ``int`` >= 1 (``bool`` is not), else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def finite_number(name: str, value: object, *, above: float | None = None, at_least: float | None = None) -> float:
    """``value`` if it is a finite real number (``> above`` / ``>= at_least`` when given), else ``ValueError``.

    The message states the bound: ``beta must be a finite number > 0, got -1``.
    """
    bound = f" > {above:g}" if above is not None else f" >= {at_least:g}" if at_least is not None else ""
    ok = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if ok and above is not None:
        ok = value > above
    if ok and at_least is not None:
        ok = value >= at_least
    if not ok:
        raise ValueError(f"{name} must be a finite number{bound}, got {value!r}")
    return float(value)
