"""The one rule for seeds, checked by every command before any work: an integer in ``[0, 2**63)``.

``2**63`` leaves room for the fixed offsets some stages add to the seed (at most a few million)
below torch's limit of ``2**64``.
"""

from __future__ import annotations

SEED_LIMIT = 2**63


def check_seed(seed: object, name: str = "seed") -> int:
    """Return ``seed`` if it is an integer with ``0 <= seed < 2**63``; otherwise raise naming ``name``.

    Raises:
        TypeError: not an ``int`` (a ``bool`` counts as not one).
        ValueError: out of range.
    """
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"{name} must be an integer in [0, 2**63), got {type(seed).__name__}")
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"{name} must be an integer in [0, 2**63), got {seed}")
    return seed
