"""Each probe headline against the probed model's parameter count: one panel per hypothesis, one point per model.

The point is the median of the model's headline over its seeds, its bar runs from the lowest seed's value to the
highest, and the x axis is the parameter count on a log scale (the ``seeds.json`` documents of
``results.seed_spread``). The marker is the seeds' verdict (one verdict over every seed), hollow where the seeds'
verdicts differ; a hypothesis skipped on a model has no point there (the reason is in that model's records). A panel
whose values are all positive and span more than two decades has a log y axis.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence

from expattn.report.figures_draw import RC, colour, model_label
from expattn.results.plotting import pyplot
from expattn.results.seed_spread import spread_name

TITLE_CHARS = 48
MARKERS = {"supported": "o", "pass": "o", "not_supported": "X", "fail": "X", "inconclusive": "^"}
COLUMNS = 3


def _count(n: int) -> str:
    """A parameter count as a tick label: 22.7M, 135M, 1.54B."""
    value, unit = (n / 1e9, "B") if n >= 1e9 else (n / 1e6, "M")
    return f"{value:.3g}{unit}"


def _verdict(entry: dict) -> str:
    """The seeds' most common verdict (the first of equals in seed order)."""
    return Counter(entry["verdicts"]).most_common(1)[0][0]


def size_figure(spreads: Sequence[dict], parameters: Mapping[str, int]):
    """A matplotlib figure of ``spreads`` (``seeds.json`` documents) against ``parameters`` (model -> its count).

    Raises:
        ValueError: a model of ``spreads`` has no count in ``parameters``, or ``spreads`` is empty.
    """
    if not spreads:
        raise ValueError("spreads must hold at least one seeds.json document")
    missing = [d["model"] for d in spreads if d["model"] not in parameters]
    if missing:
        raise ValueError(f"parameters must give every model's count, missing {missing}")
    models = sorted(spreads, key=lambda d: parameters[d["model"]])
    claims = list(dict.fromkeys(h["id"] for d in models for h in d["hypotheses"]))
    counts = sorted({parameters[d["model"]] for d in models})
    plt = pyplot()
    rows = math.ceil(len(claims) / COLUMNS)
    with plt.rc_context(RC):
        fig, axes = plt.subplots(rows, COLUMNS, figsize=(4.0 * COLUMNS, 3.0 * rows), squeeze=False,
                                 layout="constrained")
        for ax, claim in zip(axes.flat, claims, strict=False):
            values = []
            for index, doc in enumerate(models):
                entry = next((h for h in doc["hypotheses"] if h["id"] == claim), None)
                if entry is None or entry["median"] is None:
                    continue
                mid, low, high = entry["median"], entry["min"], entry["max"]
                values += [low, high]
                face = colour(index) if entry["verdicts_agree"] else "white"
                ax.errorbar([parameters[doc["model"]]], [mid], yerr=[[mid - low], [high - mid]], color=colour(index),
                            marker=MARKERS.get(_verdict(entry), "s"), markerfacecolor=face, markersize=7, capsize=3)
            description = next(h["description"] for d in models for h in d["hypotheses"] if h["id"] == claim)
            ax.set_title(textwrap.fill(f"{claim}: {description}", TITLE_CHARS))
            ax.set_xscale("log")
            ax.set_xlim(counts[0] / 1.6, counts[-1] * 1.6)
            ax.set_xticks(counts, [_count(n) for n in counts])
            ax.minorticks_off()
            ax.set_xlabel("parameters")
            if values and min(values) > 0 and max(values) / min(values) > 100:
                ax.set_yscale("log")
        for ax in axes.flat[len(claims):]:
            ax.set_visible(False)
        handles = [plt.Line2D([], [], color=colour(i), marker="o", linestyle="", label=model_label(spread_name(d)))
                   for i, d in enumerate(models)]
        handles += [plt.Line2D([], [], color="black", marker=m, linestyle="", markerfacecolor="black" if v else "white",
                               label=label) for m, v, label in (("o", True, "supported / pass"),
                                                                ("X", True, "not supported / fail"),
                                                                ("^", True, "inconclusive"),
                                                                ("o", False, "verdicts differ over seeds"))]
        fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), frameon=False)
    return fig
