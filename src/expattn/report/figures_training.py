"""Hypotheses along training: each sweep record's headline number against the training step, one line per run.

A training sweep (``expattn.sweeps.curves``) probes every run at a few steps from its initialisation (step 0) on;
its E1-E3 records hold ``details["curve"]``: run -> ``[{step, value, verdict}, ...]``. One panel per hypothesis,
one colour per run (the same run keeps its colour in every panel); a filled marker where that point's verdict
accepts the hypothesis (``pass``/``supported``), a hollow one otherwise. Nothing is measured here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from expattn.catalogue import headlines
from expattn.report.figures_draw import colour, model_label, new_figure, style, svg_uri
from expattn.results.record import PASSING, Record


def training_curves(records: Sequence[Record]) -> list[tuple[str, dict[str, list[tuple[int, float, str]]]]]:
    """(claim, run -> ``[(step, value, verdict), ...]`` in step order) of every record holding a curve; points
    without a finite value are left out, and so are runs left without points."""
    found = []
    for r in records:
        curve = r.details.get("curve")
        if not isinstance(curve, dict):
            continue
        runs = {}
        for run, points in curve.items():
            kept = sorted((int(p["step"]), float(p["value"]), str(p["verdict"])) for p in points
                          if isinstance(p, dict) and isinstance(p.get("value"), int | float)
                          and math.isfinite(p["value"]))
            if kept:
                runs[str(run)] = kept
        if runs:
            found.append((r.id, runs))
    return found


def training_uri(records: Sequence[Record]) -> str | None:
    """SVG data URI of the training curves of ``records`` (None: no record holds one)."""
    found = training_curves(records)
    if not found:
        return None
    names = list(dict.fromkeys(run for _, runs in found for run in runs))
    described = headlines()
    with style():
        fig, axes = new_figure(1, len(found), 3.8 * len(found) + 0.6, 3.2)
        for ax, (claim, runs) in zip(axes.flat, found, strict=True):
            for run, points in runs.items():
                c = colour(names.index(run))
                steps, values = [p[0] for p in points], [p[1] for p in points]
                ax.plot(steps, values, "-", color=c, lw=1.2, label=model_label(run))
                for step, value, verdict in points:
                    ax.plot([step], [value], "o", color=c, markersize=5,
                            markerfacecolor=c if verdict in PASSING else "white")
            ax.set_title(f"{claim}: {described.get(claim, ('', ''))[0]}", loc="left")
            ax.set_xlabel("training step (0: initialisation)")
            ax.grid(alpha=0.3)
        axes.flat[0].legend(loc="best")
        return svg_uri(fig)
