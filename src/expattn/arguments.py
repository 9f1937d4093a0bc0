"""Checks of scalar arguments shared by every layer: each raises ``ValueError`` naming the argument.

Tensor arguments are checked by ``expattn.core.validate``; these are the plain numbers of configs
and constructors (sizes, counts, inverse temperatures, penalties).
"""

from __future__ import annotations

import math


def _int_at_least(value: object, at_least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= at_least


def integer(name: str, value: object, *, at_least: int) -> int:
    """``value`` if it is an ``int`` (``bool`` is not) ``>= at_least``, else ``ValueError``.

    The message names the argument and the bound: ``iters must be an integer >= 2, got 1``.
    """
    if not _int_at_least(value, at_least):
        raise ValueError(f"{name} must be an integer >= {at_least}, got {value!r}")
    return value


def optional_integer(name: str, value: object, *, at_least: int) -> int | None:
    """``None``, or ``value`` if it is an ``int`` (``bool`` is not) ``>= at_least``, else ``ValueError``.

    The message names the argument and the bound: ``steps must be an integer >= 1 or None, got 0``.
    """
    if value is not None and not _int_at_least(value, at_least):
        raise ValueError(f"{name} must be an integer >= {at_least} or None, got {value!r}")
    return value


def positive_int(name: str, value: object) -> int:
    """``integer(name, value, at_least=1)``: an ``int`` >= 1 (``bool`` is not)."""
    return integer(name, value, at_least=1)


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
