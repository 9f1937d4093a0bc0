"""The headlines-by-size figure: one point per model at its seeds' median, the bar over its seeds' range, at its
parameter count; hollow where the seeds' verdicts differ; nothing for a skipped hypothesis."""

from __future__ import annotations

import numpy as np
import pytest

from expattn.report.figures_size import size_figure
from expattn.results.plotting import pyplot


def _entry(claim, values, verdicts):
    return {"id": claim, "description": f"{claim}'s headline", "seeds": [0, 1, 2], "values": values,
            "verdicts": verdicts, "median": None if values[0] is None else float(np.median(values)),
            "min": None if values[0] is None else min(values), "max": None if values[0] is None else max(values),
            "verdicts_agree": len(set(verdicts)) == 1}


SPREADS = [
    {"model": "big", "seeds": [0, 1, 2], "hypotheses": [
        _entry("E1", [2.0, 3.0, 5.0], ["supported"] * 3), _entry("E2", [1e-4, 2e-4, 3e-4], ["supported"] * 3),
        _entry("E4", [None] * 3, ["skipped"] * 3)]},
    {"model": "small", "seeds": [0, 1, 2], "hypotheses": [
        _entry("E1", [0.5, 0.7, 0.9], ["supported", "inconclusive", "supported"]),
        _entry("E2", [0.5, 0.6, 0.8], ["not_supported"] * 3), _entry("E4", [0.1, 0.2, 0.3], ["not_supported"] * 3)]},
]


def _points(ax):
    """(x, y, face colour) of each errorbar's marker line in ``ax``."""
    return [(*line.get_xydata()[0], line.get_markerfacecolor()) for line in ax.lines
            if line.get_marker() in ("o", "X", "^", "s")]


def test_each_model_is_a_point_at_its_median_and_count_with_its_seeds_range():
    fig = size_figure(SPREADS, {"small": 20_000_000, "big": 1_500_000_000})
    e1, e2, e4 = fig.axes[:3]
    points = _points(e1)
    assert [(x, y) for x, y, _ in points] == [(20_000_000, 0.7), (1_500_000_000, 3.0)]  # ordered by size
    assert points[0][2] == "white" and points[1][2] != "white"  # small's verdicts differ over the seeds
    caps = sorted(y for line in e1.lines if line.get_marker() == "_" for y in line.get_ydata())
    assert caps == [0.5, 0.9, 2.0, 5.0]  # each bar from the lowest seed's value to the highest
    assert e1.get_yscale() == "linear" and e2.get_yscale() == "log"  # E2 spans 1e-4 to 0.8
    assert [(x, y) for x, y, _ in _points(e4)] == [(20_000_000, 0.2)]  # skipped on big: no point
    assert e1.get_xscale() == "log" and [t.get_text() for t in e1.get_xticklabels()] == ["20M", "1.5B"]
    pyplot().close(fig)


def test_a_model_without_a_count_or_no_document_is_refused():
    with pytest.raises(ValueError, match=r"parameters must give every model's count, missing \['big'\]"):
        size_figure(SPREADS, {"small": 1})
    with pytest.raises(ValueError, match="spreads must hold at least one"):
        size_figure([], {})
