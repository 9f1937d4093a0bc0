"""The massive-activation profile (Sun et al. 2024) of each probed model, from E3's records (no new measurement).

Left: the largest $|x|$ of the residual stream at each depth (``details["massive_activations"]["per_layer"]``,
depth 0 = the embeddings) against relative depth, with the rule's absolute threshold $|x| = 100$; right: the same
maximum over the depth's median $|x|$, with the rule's ratio $1000$. A depth has massive activations where a curve
is above both lines. Log scales: the values span five orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from expattn.report.figures_curves import models_of
from expattn.report.figures_draw import colour, finish, model_label, new_figure, style, svg_uri
from expattn.results.record import Record

ABSOLUTE, RATIO = 100.0, 1000.0  # Sun et al.'s rule, as E3 applies it (probes.massive)


def profiles(records: Sequence[Record]) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """(model, max |x| per depth, median |x| per depth) of every E3 record that has a profile."""
    out = []
    for r in records:
        rows = ((r.details.get("massive_activations") or {}).get("per_layer") or []) if r.id == "E3" else []
        if rows:
            out.append((str(r.details["model"]), np.array([row["max"] for row in rows], dtype=float),
                        np.array([row["median"] for row in rows], dtype=float)))
    return out


def massive_uri(records: Sequence[Record]) -> str | None:
    """SVG data URI of the profile, one colour per model as in the other figures (None: no E3 profile)."""
    found = profiles(records)
    if not found:
        return None
    models = models_of(records)
    with style():
        fig, axes = new_figure(1, 2, 9.0, 3.0)
        for model, top, median in found:
            depth = np.linspace(0.0, 1.0, len(top)) if len(top) > 1 else np.zeros(1)
            index = models.index(model)
            for ax, values in ((axes[0, 0], top), (axes[0, 1], top / np.maximum(median, np.finfo(float).tiny))):
                ax.plot(depth, values, color=colour(index), marker="o", markersize=2.5, linewidth=1.3,
                        label=model_label(model))
        finish(axes[0, 0], "largest |x| per depth", "max |x|", ABSOLUTE, True)
        finish(axes[0, 1], "largest |x| over the depth's median", "max |x| / median |x|", RATIO, True)
        axes[0, 0].legend(loc="upper left", frameon=False)
        return svg_uri(fig)
