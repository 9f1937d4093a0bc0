r"""Per-head maps (layer x head), one panel per model: E4's alignment, E5's error and E8's coherence.

Cell $(l, h)$ is the record's own number for head $h$ of layer $l$ (``figures_series.HEAD_MAPS``).
A diverging scale centred on 0 for cosines (symmetric limits $\pm \max |c|$), ``log10`` for
errors; one colour scale shared by all models of a map, so panels compare. Cells are vector
rectangles (``pcolormesh``) unless a map has more than ``VECTOR_CELLS`` cells, where they are
rasterised at ``RASTER_DPI``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from expattn.report.figures_draw import model_label, new_figure, style, svg_uri
from expattn.report.figures_series import HEAD_MAPS, grid
from expattn.results.record import Record

VECTOR_CELLS = 4096
RASTER_DPI = 200
PANELS_PER_ROW = 3


def head_grids(records: Sequence[Record], claim: str) -> list[tuple[str, np.ndarray]]:
    """(model, ``(layer, head)`` array) of each record of ``claim`` that has the map's entry."""
    key = HEAD_MAPS[claim].key
    found = []
    for r in records:
        if r.id == claim and (values := grid(r.details.get(key))) is not None:
            found.append((str(r.details["model"]), values))
    return found


def _limits(maps: list[np.ndarray], log: bool) -> tuple[float, float] | None:
    values = np.concatenate([m[np.isfinite(m)].ravel() for m in maps])
    if values.size == 0:
        return None
    if log:
        return float(values.min()), float(values.max())
    bound = float(np.abs(values).max()) or 1.0
    return -bound, bound


def head_uri(records: Sequence[Record], claim: str) -> str | None:
    """SVG data URI of ``claim``'s layer x head maps, one panel per model (None: no record has them)."""
    label, log = HEAD_MAPS[claim].label, HEAD_MAPS[claim].log
    found = head_grids(records, claim)
    if not found:
        return None
    with np.errstate(all="ignore"):
        maps = [np.log10(np.where(m > 0, m, np.nan)) if log else m for _, m in found]
    limits = _limits(maps, log)
    if limits is None:
        return None
    cols = min(len(maps), PANELS_PER_ROW)
    rows = -(-len(maps) // cols)
    with style():
        fig, axes = new_figure(rows, cols, 3.6 * cols + 0.8, 3.2 * rows)
        mesh = None
        for ax, (model, _), values in zip(axes.flat, found, maps, strict=False):
            layers, heads = values.shape
            mesh = ax.pcolormesh(np.ma.masked_invalid(values), cmap="viridis" if log else "RdBu_r",
                                 vmin=limits[0], vmax=limits[1], rasterized=values.size > VECTOR_CELLS,
                                 edgecolors="face", linewidth=0.2)
            ax.set_title(f"{claim} {model_label(model)}", loc="left")
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            for axis, n in ((ax.xaxis, heads), (ax.yaxis, layers)):
                shown = np.arange(0, n, 1 if n <= 16 else 4)
                axis.set_ticks(shown + 0.5, [str(i) for i in shown])
            ax.invert_yaxis()
        for ax in list(axes.flat)[len(maps):]:
            ax.set_visible(False)
        fig.tight_layout()
        fig.colorbar(mesh, ax=axes.ravel().tolist(), label=label, shrink=0.9)
        return svg_uri(fig, dpi=RASTER_DPI, tight=False)
