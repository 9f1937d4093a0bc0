"""The records as one long table (``results.csv``, ``ProbeResults.to_frame``): a row per record, layer, head, metric.

Rows come from two places:

- every numeric metric of a record (``layer`` and ``head`` empty);
- for a record of a probed model (``details["model"]``), the per-layer numbers in its details:
  a list of numbers is one value per layer (per depth for E3), a ``{"estimate", "low", "high"}``
  dict of such lists is one value per layer with its interval, and a list of lists of numbers is
  one value per (layer, head) (E4, E5). E7's curves are stored as a list of series over depth:
  ``layer`` is the depth there, and a second series gets ``[i]`` after its metric name.

``low`` and ``high`` are empty where the measurement has no interval; non-numeric details
(labels, verdict maps) are left out. Non-finite numbers, stored as ``"nan"``/``"inf"`` strings in
results.json, come back as floats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from expattn.results.record import Record

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("record", "id", "stage", "model", "source", "verdict", "metric", "layer", "head", "value", "low", "high")
SERIES_OVER_DEPTH = ("E7",)  # claims whose nested lists are (series, depth), not (layer, head)
NON_FINITE = ("nan", "inf", "-inf")


def record_label(record: Record) -> str:
    """Where a record comes from: ``verify``, ``simulate b3-expansion``, ``probe minilm``."""
    details = record.details
    keys = ("stage", "preset", "name", "model")
    parts = [str(details.get(key)) for key in keys if details.get(key) not in (None, "")]
    unique = [p for i, p in enumerate(parts) if p not in parts[:i]]
    return " ".join(unique) or record.id


def _number(value: Any) -> float | None:
    """``value`` as a float if it is a number (or a non-finite number written as text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value in NON_FINITE:
        return float(value)
    return None


def _numbers(values: Any) -> list[float] | None:
    """A list of numbers as floats, or None if ``values`` is not a non-empty list of numbers only."""
    if not isinstance(values, list) or not values:
        return None
    out = [_number(v) for v in values]
    return None if any(v is None for v in out) else out


def _detail_rows(claim: str, key: str, value: Any) -> Iterable[tuple[str, int, int | None, float, float, float]]:
    """(metric, layer, head, value, low, high) rows of one details entry of a probe record."""
    nan = math.nan
    flat = _numbers(value)
    if flat is not None:
        yield from ((key, i, None, v, nan, nan) for i, v in enumerate(flat))
        return
    if isinstance(value, dict) and set(value) == {"estimate", "low", "high"}:
        est, low, high = (_numbers(value[k]) for k in ("estimate", "low", "high"))
        if est is not None and low is not None and high is not None and len(est) == len(low) == len(high):
            yield from ((key, i, None, e, lo, hi) for i, (e, lo, hi) in enumerate(zip(est, low, high, strict=True)))
        return
    if isinstance(value, list) and value and all(_numbers(row) is not None for row in value):
        for i, row in enumerate(value):
            if claim in SERIES_OVER_DEPTH:
                name = key if i == 0 else f"{key}[{i}]"
                yield from ((name, depth, None, v, nan, nan) for depth, v in enumerate(_numbers(row)))
            else:
                yield from ((key, i, head, v, nan, nan) for head, v in enumerate(_numbers(row)))


def records_frame(records: Sequence[Record]) -> pd.DataFrame:
    """One row per (record, layer, head, metric) of ``records``; columns ``COLUMNS``.

    ``record`` is the record's position in ``records`` (its index in results.json), ``layer`` and
    ``head`` are nullable integers, ``value``/``low``/``high`` floats (``low``/``high`` missing
    where there is no interval). Metrics and details are read, never changed.
    """
    if not isinstance(records, Sequence) or not all(isinstance(r, Record) for r in records):
        raise TypeError("records must be a sequence of Record")
    import pandas as pd  # pandas loads only when a table is asked for

    rows = []
    for index, record in enumerate(records):
        details = record.details
        head = (index, record.id, str(details.get("stage", "")), str(details.get("model", "")), record_label(record),
                record.verdict)
        for key, value in record.metrics.items():
            number = _number(value)
            if number is not None:
                rows.append((*head, key, None, None, number, math.nan, math.nan))
        if details.get("model") not in (None, ""):
            for key, value in details.items():
                rows += [(*head, *row) for row in _detail_rows(record.id, key, value)]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["record"] = frame["record"].astype("int64")
    for column in ("layer", "head"):
        frame[column] = frame[column].astype("Int64")
    for column in ("value", "low", "high"):
        frame[column] = frame[column].astype("float64")
    return frame
