"""Figures: matplotlib on the file-only Agg backend and one way to save them."""

from __future__ import annotations

from pathlib import Path


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed), imported on first use."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["text.usetex"] = False  # a user's matplotlibrc must not send titles through TeX
    import matplotlib.pyplot as plt

    return plt


def plain_label(text: object) -> str:
    """A user string (a model name, a path) for a figure's text: ``$`` escaped, so it never starts mathtext."""
    return str(text).replace("$", r"\$")


def save_figure(fig, out_dir: Path, name: str) -> list[str]:
    """Write ``fig`` to ``out_dir / name`` (110 dpi), close it, and return ``[name]`` for ``Record.plots``; a figure
    without a layout engine of its own is laid out tight."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(Path(out_dir) / name, dpi=110)
    pyplot().close(fig)
    return [name]
