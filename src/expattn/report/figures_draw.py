"""Drawing helpers of the report's figures: SVG data URIs, one colour per model, curves with bands.

A figure becomes ``data:image/svg+xml;base64,...``: vector, crisp at any zoom, and allowed by the
page's content-security policy (``img-src data:``); an SVG shown through ``<img>`` runs no script and
loads nothing. Text stays text (``svg.fonttype: none``) and the output is reproducible (fixed hash
salt, no date). Model names reach matplotlib as plain text (``plain_label``).
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np

from expattn.report.figures_series import Series
from expattn.results.plotting import plain_label, pyplot

RC = {"svg.fonttype": "none", "svg.hashsalt": "expattn", "font.size": 9, "axes.titlesize": 9,
      "axes.labelsize": 8, "legend.fontsize": 8, "xtick.labelsize": 7, "ytick.labelsize": 7}
# The summary figure's sizes: it spans the page, and its smallest text (a log axis's exponent, 0.7 of a tick label)
# is then at least 10 px high at 1366 x 768 (11 in of figure over about 1,300 px: 1.6 px per point).
SUMMARY_RC = {"font.size": 10.5, "axes.titlesize": 10.5, "axes.labelsize": 10, "legend.fontsize": 10.5,
              "xtick.labelsize": 10, "ytick.labelsize": 10}
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f")
LABEL_CHARS = 40


def model_label(model: str) -> str:
    """A model name for a legend: plain text (no mathtext), at most ``LABEL_CHARS`` characters."""
    text = model if len(model) <= LABEL_CHARS else model[: LABEL_CHARS - 3] + "..."
    return plain_label(text)


def colour(index: int) -> str:
    """The colour of the ``index``-th model, the same in every figure."""
    return COLOURS[index % len(COLOURS)]


def style(summary: bool = False):
    """Context manager: matplotlib settings ``RC`` (with ``SUMMARY_RC`` for the summary figure) for everything
    drawn and saved inside it."""
    return pyplot().rc_context({**RC, **(SUMMARY_RC if summary else {})})


def new_figure(rows: int, cols: int, width: float, height: float):
    """A matplotlib figure (``width`` x ``height`` inches) and its ``(rows, cols)`` axes array."""
    return pyplot().subplots(rows, cols, figsize=(width, height), squeeze=False)


def svg_uri(fig, dpi: int = 100, tight: bool = True) -> str:
    """``fig`` as an SVG data URI (call inside ``style()``; ``dpi`` matters for rasterised parts only);
    closes the figure. ``tight``: lay it out with ``tight_layout`` first."""
    buffer = io.BytesIO()
    try:
        if tight:
            fig.tight_layout()
        fig.savefig(buffer, format="svg", dpi=dpi, metadata={"Date": None})
    finally:
        pyplot().close(fig)
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def draw(ax, series: Series, colour_: str, label: str | None) -> bool:
    """Draw ``series`` (line and band) against relative depth; False when it has no finite point."""
    est = np.array(series.estimate, dtype=float)
    keep = np.isfinite(est)
    if not keep.any():
        return False
    x = series.depth
    ax.plot(x[keep], est[keep], color=colour_, linestyle=series.style, marker="o", markersize=2.5, linewidth=1.3,
            label=label)
    if series.low is not None and series.high is not None:
        low, high = np.array(series.low, dtype=float), np.array(series.high, dtype=float)
        both = keep & np.isfinite(low) & np.isfinite(high)
        ax.fill_between(x[both], low[both], high[both], color=colour_, alpha=0.18, linewidth=0)
    return True


def positive(series: list[Series]) -> bool:
    """True when every finite estimate and band edge is > 0 (a log axis can show them)."""
    values = [v for s in series for part in (s.estimate, s.low or (), s.high or ()) for v in part if math.isfinite(v)]
    return bool(values) and min(values) > 0


def finish(ax, title: str, ylabel: str, reference: float | None, log: bool) -> None:
    """Axis labels, an optional dotted reference line, log scale, light grid."""
    ax.set_title(title, loc="left")
    ax.set_xlabel("relative depth")
    ax.set_ylabel(ylabel)
    ax.set_xlim(-0.03, 1.03)
    if reference is not None:
        ax.axhline(reference, color="#555555", linestyle=":", linewidth=0.9)
    if log:
        ax.set_yscale("log")
    ax.grid(alpha=0.25, linewidth=0.5)
