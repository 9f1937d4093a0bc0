"""The per-layer numbers the report's figures draw, read from probe records' ``details``.

Relative depth of point $i$ of a series of $n$ points is $i / (n - 1)$ (0 for a single point): the
first layer (or the embeddings, for E3's depths) at 0, the last at 1, so models of different depth
share one axis. Nothing is re-measured: every number is a record's, or an order statistic of a
record's per-head numbers (median and quartiles over heads, named as such). Details are read
defensively: a missing or malformed entry gives no series, never an error, and non-finite numbers
(stored as ``"nan"``/``"inf"`` text) come back as floats and are left out of the drawing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from expattn.catalogue import Curve, curves, head_maps
from expattn.results.record import Record

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True)
class Series:
    """One curve: ``estimate`` per point and its band (``low``, ``high``; ``None``: no band).

    ``style`` is ``"solid"`` or ``"dashed"`` (a second quantity of the same model on one panel).
    """

    label: str
    estimate: tuple[float, ...]
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    style: str = "solid"

    @property
    def depth(self) -> np.ndarray:
        """Relative depth $i / (n - 1)$ of each point, ``(n,)``."""
        n = len(self.estimate)
        return np.arange(n) / (n - 1) if n > 1 else np.zeros(n)


def numbers(values: Any) -> tuple[float, ...] | None:
    """A non-empty list of numbers (non-finite ones written as text allowed) as floats, else None."""
    if not isinstance(values, list) or not values:
        return None
    out = []
    for v in values:
        if isinstance(v, bool):
            return None
        if isinstance(v, int | float):
            out.append(float(v))
        elif isinstance(v, str) and v in NON_FINITE:
            out.append(NON_FINITE[v])
        else:
            return None
    return tuple(out)


def grid(values: Any) -> np.ndarray | None:
    """A list of equal-length lists of numbers as a ``(layer, head)`` float array, else None."""
    if not isinstance(values, list) or not values:
        return None
    rows = [numbers(row) for row in values]
    if any(r is None for r in rows) or len({len(r) for r in rows}) != 1:
        return None
    return np.array(rows, dtype=float)


def interval(details: dict[str, Any], key: str, label: str = "", style: str = "solid") -> Series | None:
    """The ``{"estimate", "low", "high"}`` entry ``key`` of ``details`` as a Series, else None."""
    value = details.get(key)
    if not isinstance(value, dict):
        return None
    est, low, high = (numbers(value.get(k)) for k in ("estimate", "low", "high"))
    if est is None or low is None or high is None or not len(est) == len(low) == len(high):
        return None
    return Series(label or key, est, low, high, style)


def interval_keys(details: dict[str, Any]) -> list[str]:
    """Keys of the interval entries of ``details``; an ``X_all`` is left out where ``X_excl`` exists
    (the verdicts read the tokens without first/special and massive ones)."""
    keys = [k for k in details if interval(details, k) is not None]
    return [k for k in keys if not (k.endswith("_all") and k[: -len("_all")] + "_excl" in keys)]


def _over_heads(values: Any, label: str) -> Series | None:
    """Median over heads per layer, band between the heads' first and third quartiles."""
    heads = grid(values)
    if heads is None:
        return None
    with np.errstate(all="ignore"):
        q1, med, q3 = np.nanpercentile(heads, [25, 50, 75], axis=1)
    return Series(label, tuple(med), tuple(q1), tuple(q3))


def _max_over_heads(values: Any, label: str) -> Series | None:
    """Maximum over heads per layer, band from the minimum to the maximum over heads."""
    heads = grid(values)
    if heads is None:
        return None
    return Series(label, tuple(heads.max(axis=1)), tuple(heads.min(axis=1)), tuple(heads.max(axis=1)))


def _folds(details: dict[str, Any], prefix: str, label: str) -> list[Series]:
    """Mean over the folds per layer of the entries ``prefix0``, ``prefix1``, ... (E6's held-out R^2), band from the
    lowest fold to the highest."""
    folds = [numbers(details[k]) for k in sorted(details) if k.startswith(prefix)]
    if not folds or any(f is None or len(f) != len(folds[0]) for f in folds):
        return []
    each = np.array(folds)
    return [Series(label, tuple(each.mean(axis=0)), tuple(each.min(axis=0)), tuple(each.max(axis=0)))]


def _decades(details: dict[str, Any], keys: tuple[str, ...], labels: tuple[str, ...]) -> list[Series]:
    r"""Decades lost since depth 0, $-\log_{10}(\operatorname{res}_\ell / \operatorname{res}_0)$, of the first row
    of each entry ``keys`` (E7: pure attention, solid; with the skip path, dashed); no band (one deterministic pass
    per sequence set)."""
    out = []
    for i, (key, label) in enumerate(zip(keys, labels, strict=True)):
        rows = details.get(key)
        series = numbers(rows[0]) if isinstance(rows, list) and rows else None
        if series is None or not series[0] > 0:
            continue
        with np.errstate(all="ignore"):
            out.append(Series(label, tuple(-np.log10(np.array(series) / series[0])), style="dashed" if i else "solid"))
    return out


def _one(found: Series | None) -> list[Series]:
    return [] if found is None else [found]


@dataclass(frozen=True)
class Headline:
    """How the summary figure draws one hypothesis: y label, reference line, log scale, and its series."""

    ylabel: str
    band: str
    read: Callable[[dict[str, Any]], list[Series]]
    reference: float | None = None
    log: bool = False


def _intervals(details: dict[str, Any], curve: Curve) -> list[Series]:
    """Each key's interval entry, the first solid, the others dashed."""
    labels = curve.labels or ("",) * len(curve.keys)
    return [s for i, (key, label) in enumerate(zip(curve.keys, labels, strict=True))
            for s in _one(interval(details, key, label, "dashed" if i else "solid"))]


def _label(curve: Curve) -> str:
    """The label of a one-series curve: its own, else its details key."""
    return (curve.labels or curve.keys)[0]


# Curve.reader -> how the series are read from a record's details
READERS: dict[str, Callable[[dict[str, Any], Curve], list[Series]]] = {
    "interval": _intervals,
    "median_over_heads": lambda d, c: _one(_over_heads(d.get(c.keys[0]), _label(c))),
    "max_over_heads": lambda d, c: _one(_max_over_heads(d.get(c.keys[0]), _label(c))),
    "folds": lambda d, c: _folds(d, c.keys[0], _label(c)),
    "decades": lambda d, c: _decades(d, c.keys, c.labels or c.keys),
}


def _headline(curve: Curve) -> Headline:
    return Headline(curve.ylabel, curve.band, lambda d: READERS[curve.reader](d, curve), curve.reference, curve.log)


# Per hypothesis, the per-layer form of its headline number and its per-head map: declared in the catalogue
HEADLINE_CURVES = {claim: _headline(curve) for claim, curve in curves().items()}
HEAD_MAPS = head_maps()


def probe_records(records: list[Record]) -> list[Record]:
    """The records of a probed model (``details["model"]`` set), in order."""
    return [r for r in records if isinstance(r.details, dict) and r.details.get("model") not in (None, "")]
