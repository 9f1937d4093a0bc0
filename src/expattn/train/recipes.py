"""Named training recipes: the one source of training defaults.

A recipe is a set of ``LMConfig`` and ``TrainConfig`` fields over the dataclasses' own defaults:

| recipe | model | steps | evaluated every | used by |
|---|---|---:|---:|---|
| ``single`` | the dataclasses' defaults: 4 layers, width 128 (nanoGPT's CPU recipe) | 2,000 | 250 | ``train`` |
| ``sweep`` | 2 layers, width 64: 400 x 12 x 64 = 307,200 tokens per model | 400 | 100 | ``train --sweep`` |
| ``sweep-quick`` | as ``sweep``; probed at the initialisation and the end only | 100 | 50 | ``report --quick`` |

``recipe(name, out, **given)`` builds the configs; a field given as ``None`` is left to the recipe, so the command
line, the report and the Python API read the same numbers. ``default(name, field)`` is what the CLI's help shows.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from expattn.nn.lm import LMConfig
from expattn.train.loop import TrainConfig

_SWEEP = {"layers": 2, "dim": 64, "iters": 400, "eval_every": 100}
RECIPES: dict[str, dict[str, object]] = {
    "single": {},
    "sweep": _SWEEP,
    "sweep-quick": _SWEEP | {"iters": 100, "eval_every": 50, "snapshots": (0,)},
}
MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(LMConfig))
TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig)) - {"out", "model"}


def _recipe(name: str) -> dict[str, object]:
    if name not in RECIPES:
        raise ValueError(f"recipe must be one of {', '.join(RECIPES)}, got {name!r}")
    return RECIPES[name]


def recipe(name: str, out: Path, **given: object) -> TrainConfig:
    """The ``TrainConfig`` of recipe ``name`` writing to ``out``, with the fields ``given`` on top (``None``: left
    to the recipe); ``LMConfig``'s fields go to its ``model``.

    Raises:
        ValueError: an unknown recipe or field, or a value the configs reject.
    """
    unknown = sorted(set(given) - MODEL_FIELDS - TRAIN_FIELDS)
    if unknown:
        raise ValueError(f"unknown training fields {unknown}; LMConfig and TrainConfig have "
                         f"{sorted(MODEL_FIELDS | TRAIN_FIELDS)}")
    chosen = _recipe(name) | {key: value for key, value in given.items() if value is not None}
    model = LMConfig(**{key: value for key, value in chosen.items() if key in MODEL_FIELDS})
    return TrainConfig(out=out, model=model, **{key: value for key, value in chosen.items() if key in TRAIN_FIELDS})


def default(name: str, field: str) -> object:
    """The value recipe ``name`` gives ``field`` (its own, else the dataclass default)."""
    own = _recipe(name)
    if field in own:
        return own[field]
    for cls in (LMConfig, TrainConfig):
        found = {f.name: f for f in dataclasses.fields(cls)}.get(field)
        if found is not None and found.default is not dataclasses.MISSING:
            return found.default
    raise ValueError(f"no default for training field {field!r}")
