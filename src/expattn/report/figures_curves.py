"""Curves against relative depth, one colour per model: the one-screen summary and the per-layer panels.

The summary draws each hypothesis's headline measure per layer (``figures_series.HEADLINE_CURVES``);
the per-layer figure of a hypothesis draws every interval entry of its records' details
(``figures_series.interval_keys``), models overlaid.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.lines import Line2D

from expattn.report.figures_draw import colour, draw, finish, model_label, new_figure, positive, style, svg_uri
from expattn.report.figures_series import HEADLINE_CURVES, Series, interval, interval_keys
from expattn.results.plotting import plain_label
from expattn.results.record import Record

COLUMNS = 4
TITLE_CHARS = 34


def models_of(records: Sequence[Record]) -> list[str]:
    """The probed models in order of first appearance."""
    return list(dict.fromkeys(str(r.details["model"]) for r in records))


def _short(text: str) -> str:
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 3] + "..."


def _legend(fig, models: list[str], shown: list[int]) -> None:
    handles = [Line2D([], [], color=colour(i), marker="o", markersize=3) for i in shown]
    fig.legend(handles, [model_label(models[i]) for i in shown], loc="upper center", ncol=min(len(shown), 6),
               frameon=False, bbox_to_anchor=(0.5, 1.0))


def _panels(panels: list[tuple[str, list[tuple[int, Series]], str, float | None, bool]], models: list[str],
            width: float, row_height: float, summary: bool = False) -> str | None:
    """Draw ``(title, [(model index, series)], ylabel, reference, log)`` panels in a grid; None if all empty.
    ``summary``: in the summary figure's larger text (``figures_draw.SUMMARY_RC``)."""
    panels = [p for p in panels if p[1]]
    if not panels:
        return None
    with style(summary):
        rows = math.ceil(len(panels) / COLUMNS)
        cols = min(len(panels), COLUMNS)
        fig, axes = new_figure(rows, cols, width, row_height * rows + 0.45)
        for ax, (title, curves, ylabel, reference, log) in zip(axes.flat, panels, strict=False):
            for index, series in curves:
                draw(ax, series, colour(index), None)
            finish(ax, title, ylabel, reference, log and positive([s for _, s in curves]))
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.4 / (row_height * rows + 0.45)))
        _legend(fig, models, sorted({i for p in panels for i, _ in p[1]}))
        return svg_uri(fig, tight=False)


def summary_uri(records: Sequence[Record], titles: dict[str, str]) -> str | None:
    """SVG data URI of the summary: one panel per hypothesis measured, one line per model (None: nothing)."""
    models = models_of(records)
    panels = []
    for claim, curve in HEADLINE_CURVES.items():
        found = [(models.index(str(r.details["model"])), s) for r in records if r.id == claim
                 for s in curve.read(r.details)]
        title = f"{claim} {plain_label(_short(titles.get(claim, '')))}".strip()
        panels.append((title, found, curve.ylabel, curve.reference, curve.log))
    return _panels(panels, models, 11.0, 2.7, summary=True)


def layer_uri(records: Sequence[Record], claim: str) -> tuple[str | None, list[str]]:
    """SVG data URI of ``claim``'s per-layer interval entries, models overlaid, and the entries' names."""
    models = models_of(records)
    mine = [r for r in records if r.id == claim]
    keys = list(dict.fromkeys(k for r in mine for k in interval_keys(r.details)))
    panels = []
    for key in keys:
        found = [(models.index(str(r.details["model"])), s) for r in mine
                 if (s := interval(r.details, key)) is not None]
        panels.append((f"{claim} {key}", found, key, None, False))
    return _panels(panels, models, 11.0, 2.1), keys
