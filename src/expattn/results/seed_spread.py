"""Headline numbers of one probe at several seeds: each hypothesis's number as the median over seeds with its range.

The seed draws the probe's text sample, its bootstrap and its baselines, so a number that moves between seeds
by more than the claims it supports is quoted as ``median [min, max]`` rather than as one seed's value. The
verdicts sit beside it, one per seed, with whether they agree (``results.stability`` does the same for every
record of the main job).

``headlines`` maps a hypothesis ID to ``(metric key of its record, what it is)``: the catalogue entries'
``headline``, passed in by the caller.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from expattn.results.record import Record

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class SeedSpread:
    """One hypothesis's headline over seeds.

    Attributes:
        id: the hypothesis; metric, description: its headline's key and what it is.
        seeds: the seeds, in the order run; values: the headline at each (None where the record has no
            finite number, e.g. skipped); verdicts: the verdict at each; training: at each, what the random-init
            twins made of the verdict (``learned``, ``architectural``, ``undecided``; None without twins).
    """

    id: str
    metric: str
    description: str
    seeds: tuple[int, ...]
    values: tuple[float | None, ...]
    verdicts: tuple[str, ...]
    training: tuple[str | None, ...] = ()

    @property
    def _finite(self) -> list[float]:
        return [v for v in self.values if v is not None]

    @property
    def median(self) -> float | None:
        """Median of the values over seeds (None if no seed gave one)."""
        return statistics.median(self._finite) if self._finite else None

    @property
    def low(self) -> float | None:
        return min(self._finite) if self._finite else None

    @property
    def high(self) -> float | None:
        return max(self._finite) if self._finite else None

    @property
    def twinned(self) -> bool:
        """True iff some seed was probed beside random-init twins (a ``training`` class is known)."""
        return any(t is not None for t in self.training)

    @property
    def verdicts_agree(self) -> bool:
        """True iff every seed gave the same verdict."""
        return len(set(self.verdicts)) == 1

    def as_dict(self) -> dict:
        """The JSON form (``seeds.json``'s ``hypotheses`` entries); ``training`` only when a seed had twins."""
        out = {"id": self.id, "metric": self.metric, "description": self.description, "seeds": list(self.seeds),
               "values": list(self.values), "verdicts": list(self.verdicts), "median": self.median, "min": self.low,
               "max": self.high, "verdicts_agree": self.verdicts_agree}
        if self.twinned:
            out["training"] = list(self.training)
        return out


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def seed_spread(runs: Mapping[int, Sequence[Record]], headlines: Mapping[str, tuple[str, str]]) -> list[SeedSpread]:
    """Per hypothesis of the first run (in its order), its headline at every seed of ``runs`` (seed -> records).

    Raises:
        ValueError: fewer than two seeds, or a run whose hypotheses differ from the first's.
    """
    if len(runs) < 2:
        raise ValueError(f"runs must hold at least two seeds, got {len(runs)}")
    seeds = tuple(runs)
    by_seed = {s: {r.id: r for r in records} for s, records in runs.items()}
    ids = [r.id for r in runs[seeds[0]]]
    for s in seeds:
        if sorted(by_seed[s]) != sorted(ids):
            raise ValueError(f"seed {s} measured {sorted(by_seed[s])}, seed {seeds[0]} measured {sorted(ids)}")
    out = []
    for i in ids:
        metric, description = headlines.get(i, ("", ""))
        records = [by_seed[s][i] for s in seeds]
        out.append(SeedSpread(i, metric, description, seeds, tuple(_number(r.metrics.get(metric)) for r in records),
                              tuple(r.verdict for r in records), tuple(r.training for r in records)))
    return out


def spread_document(spreads: Sequence[SeedSpread], model: str, dtype: str = "float32") -> dict:
    """``seeds.json``: the model, the dtype it ran in, the seeds and one entry per hypothesis
    (``SeedSpread.as_dict``)."""
    return {"model": model, "dtype": dtype, "seeds": list(spreads[0].seeds) if spreads else [],
            "hypotheses": [s.as_dict() for s in spreads]}


def spread_name(document: dict) -> str:
    """The model of a ``seeds.json`` document as a table or legend names it: with its dtype unless float32 (a
    document without one was written in float32)."""
    dtype = document.get("dtype", "float32")
    return document["model"] if dtype == "float32" else f"{document['model']} ({dtype})"


def spread_frame(spreads: Sequence[SeedSpread]) -> pd.DataFrame:
    """A pandas DataFrame, one row per hypothesis: ``id``, ``metric``, ``median``, ``min``, ``max``,
    ``verdicts_agree``, then ``seed N`` (the value) and ``verdict N`` for each seed, and ``training N`` where
    twins were probed."""
    import pandas as pd

    rows = []
    for s in spreads:
        row = {"id": s.id, "metric": s.metric, "median": s.median, "min": s.low, "max": s.high,
               "verdicts_agree": s.verdicts_agree}
        row.update({f"seed {seed}": v for seed, v in zip(s.seeds, s.values, strict=True)})
        row.update({f"verdict {seed}": v for seed, v in zip(s.seeds, s.verdicts, strict=True)})
        if s.twinned:
            row.update({f"training {seed}": t for seed, t in zip(s.seeds, s.training, strict=True)})
        rows.append(row)
    return pd.DataFrame(rows)
