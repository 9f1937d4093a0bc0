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


def check_seeds(seeds: object, name: str = "seeds") -> tuple[int, ...]:
    """``seeds`` as a tuple if it is a sequence of at least two distinct seeds, each following ``check_seed``;
    otherwise raise naming ``name`` (one seed is ``seed``'s job).

    Raises:
        TypeError: not a list or tuple of integers.
        ValueError: fewer than two, a repeated one, or one out of range.
    """
    if not isinstance(seeds, list | tuple):
        raise TypeError(f"{name} must be a list of integers such as [0, 1, 2], got {type(seeds).__name__}")
    chosen = tuple(check_seed(s, name) for s in seeds)
    if len(chosen) < 2:
        single = "--seed" if name.startswith("--") else "seed"
        raise ValueError(f"{name} must hold at least two seeds (for one seed, give {single} instead), "
                         f"got {list(chosen)}")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"{name} must not repeat a seed, got {list(chosen)}")
    return chosen
