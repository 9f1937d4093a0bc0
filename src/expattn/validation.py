"""The NaN policy: inputs are checked for NaN and infinity by default, with one global switch.

As with ``torch.distributions``' ``validate_args``, checks run where they are cheap (one reduction
and one host sync per call): the core measures check their arguments, ``ExpFamAttention``,
``Hopfield`` and the normalizations check their inputs and that their outputs stayed finite (logits
that overflow the float range raise instead of returning NaN). Switch them off globally with
``set_validate(False)``, for a block of code with ``with validating(False):``, or per module
instance with ``module.validate_args = False`` (``None``, the default, follows the global switch).
The fused attention kernels run either way; the checks sit outside them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_enabled = True


def set_validate(enabled: bool) -> None:
    """Turn the input and output checks on or off for every module that follows the global switch."""
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
    _enabled = enabled


def validate_enabled(own: bool | None = None) -> bool:
    """Whether to check: ``own`` (a module's ``validate_args``) when set, else the global switch."""
    return _enabled if own is None else own


@contextmanager
def validating(enabled: bool) -> Iterator[None]:
    """``set_validate(enabled)`` inside the block; the previous setting is restored on exit."""
    previous = _enabled
    set_validate(enabled)
    try:
        yield
    finally:
        set_validate(previous)
