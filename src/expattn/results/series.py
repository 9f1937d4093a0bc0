r"""Per-layer series of a probe record, typed: what the estimators hand to code above the probe.

An estimator's record stores a per-layer statistic $s_\ell$ ($\ell = 0..L-1$, or per depth
$0..L$ for E3) either as a bare list or, with its 95% Poisson-bootstrap interval, as
``{"estimate": [...], "low": [...], "high": [...]}`` in ``details``. ``layer_series`` and
``layer_values`` are the one place that reads those entries; callers (the sweeps) use the
attributes of ``LayerSeries`` instead of string keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from expattn.results.record import Record


@dataclass(frozen=True)
class LayerSeries:
    """One statistic per layer with its interval: ``low[i] <= estimate[i] <= high[i]`` (95%), each of length L."""

    estimate: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.estimate) == len(self.low) == len(self.high):
            raise ValueError(
                f"estimate, low and high must have one value per layer each, got lengths "
                f"{len(self.estimate)}, {len(self.low)} and {len(self.high)}"
            )


def _entry(record: Record, name: str) -> object:
    if record.verdict in ("skipped", "error"):
        what = "skipped" if record.verdict == "skipped" else "could not measure"
        raise ValueError(f"the probe {what} {record.id}: {record.notes}")
    if name not in record.details:
        raise ValueError(f"{record.id} record has no per-layer series {name!r}")
    return record.details[name]


def layer_series(record: Record, name: str) -> LayerSeries:
    """The series ``name`` of ``record`` (an entry ``{"estimate", "low", "high"}`` of its ``details``).

    Raises:
        ValueError: the record was skipped or an error, or ``name`` is absent or not a series with an interval.
    """
    entry = _entry(record, name)
    if not isinstance(entry, dict) or set(entry) != {"estimate", "low", "high"}:
        raise ValueError(f"{record.id} details[{name!r}] must hold 'estimate', 'low' and 'high', got {entry!r:.80}")
    return LayerSeries(*(tuple(float(v) for v in entry[k]) for k in ("estimate", "low", "high")))


def layer_values(record: Record, name: str) -> tuple[float, ...]:
    """The per-layer values ``name`` of ``record`` (a list in its ``details``, no interval).

    Raises:
        ValueError: the record was skipped or an error, or ``name`` is absent or not a list.
    """
    entry = _entry(record, name)
    if not isinstance(entry, list):
        raise ValueError(f"{record.id} details[{name!r}] must be a list of per-layer values, got {entry!r:.80}")
    return tuple(float(v) for v in entry)
