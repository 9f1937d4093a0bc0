"""The per-layer numbers the report's figures draw, read from probe records' ``details``.

Relative depth of point $i$ of a series of $n$ points is $i / (n - 1)$ (0 for a single point): the
first layer (or the embeddings, for E3's depths) at 0, the last at 1, so models of different depth
share one axis. Nothing is re-measured: every number is a record's, or an order statistic of a
record's per-head numbers (median and quartiles over heads, named as such). Details are read
defensively: a missing or malformed entry gives no series, never an error, and non-finite numbers
(stored as ``"nan"``/``"inf"`` text) come back as floats and are left out of the drawing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from expattn.results.record import Record

NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True)
class Series:
    """One curve: ``estimate`` per point and its band (``low``, ``high``; ``None``: no band).

    ``style`` is ``"solid"`` or ``"dashed"`` (a second quantity of the same model on one panel).
    """

    label: str
    estimate: tuple[float, ...]
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    style: str = "solid"

    @property
    def depth(self) -> np.ndarray:
        """Relative depth $i / (n - 1)$ of each point, ``(n,)``."""
        n = len(self.estimate)
        return np.arange(n) / (n - 1) if n > 1 else np.zeros(n)


def numbers(values: Any) -> tuple[float, ...] | None:
    """A non-empty list of numbers (non-finite ones written as text allowed) as floats, else None."""
    if not isinstance(values, list) or not values:
        return None
    out = []
    for v in values:
        if isinstance(v, bool):
            return None
        if isinstance(v, int | float):
            out.append(float(v))
        elif isinstance(v, str) and v in NON_FINITE:
            out.append(NON_FINITE[v])
        else:
            return None
    return tuple(out)


def grid(values: Any) -> np.ndarray | None:
    """A list of equal-length lists of numbers as a ``(layer, head)`` float array, else None."""
    if not isinstance(values, list) or not values:
        return None
    rows = [numbers(row) for row in values]
    if any(r is None for r in rows) or len({len(r) for r in rows}) != 1:
        return None
    return np.array(rows, dtype=float)


def interval(details: dict[str, Any], key: str, label: str = "", style: str = "solid") -> Series | None:
    """The ``{"estimate", "low", "high"}`` entry ``key`` of ``details`` as a Series, else None."""
    value = details.get(key)
    if not isinstance(value, dict):
        return None
    est, low, high = (numbers(value.get(k)) for k in ("estimate", "low", "high"))
    if est is None or low is None or high is None or not len(est) == len(low) == len(high):
        return None
    return Series(label or key, est, low, high, style)


def interval_keys(details: dict[str, Any]) -> list[str]:
    """Keys of the interval entries of ``details``; an ``X_all`` is left out where ``X_excl`` exists
    (the verdicts read the tokens without first/special and massive ones)."""
    keys = [k for k in details if interval(details, k) is not None]
    return [k for k in keys if not (k.endswith("_all") and k[: -len("_all")] + "_excl" in keys)]


def _over_heads(values: Any, label: str) -> Series | None:
    """Median over heads per layer, band between the heads' first and third quartiles."""
    heads = grid(values)
    if heads is None:
        return None
    with np.errstate(all="ignore"):
        q1, med, q3 = np.nanpercentile(heads, [25, 50, 75], axis=1)
    return Series(label, tuple(med), tuple(q1), tuple(q3))


def _max_over_heads(values: Any, label: str) -> Series | None:
    """Maximum over heads per layer, band from the minimum to the maximum over heads."""
    heads = grid(values)
    if heads is None:
        return None
    return Series(label, tuple(heads.max(axis=1)), tuple(heads.min(axis=1)), tuple(heads.max(axis=1)))


def _folds(details: dict[str, Any]) -> list[Series]:
    """E6: mean of the held-out folds' R^2 per layer (``heldout_r2_fold0``, ``1``, ...), band from the lowest fold to
    the highest."""
    folds = [numbers(details[k]) for k in sorted(details) if k.startswith("heldout_r2_fold")]
    if not folds or any(f is None or len(f) != len(folds[0]) for f in folds):
        return []
    each = np.array(folds)
    return [Series("held-out R^2", tuple(each.mean(axis=0)), tuple(each.min(axis=0)), tuple(each.max(axis=0)))]


def _residual(details: dict[str, Any]) -> list[Series]:
    r"""E7: decades the rank-one residual has lost since depth 0, $-\log_{10}(\operatorname{res}_\ell /
    \operatorname{res}_0)$ (the headline's per-layer form), pure attention (solid) and with the skip path (dashed);
    no band (one deterministic pass per sequence set)."""
    out = []
    for key, label, style in (("res_no_skip", "no skip", "solid"), ("res_skip", "with skip", "dashed")):
        rows = details.get(key)
        series = numbers(rows[0]) if isinstance(rows, list) and rows else None
        if series is None or not series[0] > 0:
            continue
        with np.errstate(all="ignore"):
            out.append(Series(label, tuple(-np.log10(np.array(series) / series[0])), style=style))
    return out


def _one(found: Series | None) -> list[Series]:
    return [] if found is None else [found]


@dataclass(frozen=True)
class Headline:
    """How the summary figure draws one hypothesis: y label, reference line, log scale, and its series."""

    ylabel: str
    band: str
    read: Callable[[dict[str, Any]], list[Series]]
    reference: float | None = None
    log: bool = False


# Per hypothesis, the per-layer form of its headline number (``report.matrix.HEADLINES``).
HEADLINE_CURVES = {
    "E1": Headline("spread ratio (x + attn) / x", "95% interval",
                   lambda d: _one(interval(d, "raw_ratio_excl")), reference=1.0),
    "E2": Headline("scale-free ratio after / before", "95% interval; solid norm1, dashed norm2",
                   lambda d: _one(interval(d, "norm1_normalized_ratio_excl", "norm1"))
                   + _one(interval(d, "norm2_normalized_ratio_excl", "norm2", "dashed")), reference=1.0),
    "E3": Headline("mean |excess kurtosis|", "95% interval", lambda d: _one(interval(d, "mean_abs_kurtosis_excl")),
                   log=True),
    "E4": Headline(r"$\cos(W_q^\top W_k,\ \Sigma^{+})$",
                   "median over heads on the range of Sigma, band: quartiles over heads",
                   lambda d: _one(_over_heads(d.get("cos_sigma_inv"), "median over heads")), reference=0.0),
    "E5": Headline(r"max error vs $\nabla \log Z$", "band: min to max over heads",
                   lambda d: _one(_max_over_heads(d.get("identity_f32"), "max over heads")), log=True),
    "E6": Headline("held-out R^2 of a linear fit", "band: lowest to highest of the five folds", _folds,
                   reference=0.0),
    "E7": Headline("decades lost since depth 0", "no interval; solid no skip, dashed with skip", _residual),
    "E8": Headline("mean pairwise cos of heads", "95% interval", lambda d: _one(interval(d, "mean_pairwise_cos")),
                   reference=0.0),
    "E9": Headline(r"$\cos(W_q^\top W_k,\ \Sigma)$",
                   "median over heads on the range of Sigma, band: quartiles over heads",
                   lambda d: _one(_over_heads(d.get("cos_sigma"), "median over heads")), reference=0.0),
}

# Per-head maps (layer x head): details key, colour-bar label, the same as plain text, log10 colour scale.
HEAD_MAPS = {
    "E4": ("cos_sigma_inv", r"cosine of $W_q^\top W_k$ with $\Sigma^{+}$ (range of $\Sigma$)",
           "Cosine of W_q^T W_k with Sigma^+ on the range of Sigma", False),
    "E9": ("cos_sigma", r"cosine of $W_q^\top W_k$ with $\Sigma$ (range of $\Sigma$)",
           "Cosine of W_q^T W_k with Sigma on the range of Sigma", False),
    "E5": ("identity_f32", r"$\log_{10}$ max error of attention vs $\nabla \log Z$ (float32)",
           "log10 of the max error of attention against grad log Z (float32)", True),
    "E8": ("head_coherence", "mean cosine with the other heads, minus the other-token null",
           "Mean cosine of a head's update with the other heads' at the same token, minus the same at other tokens",
           False),
}


def probe_records(records: list[Record]) -> list[Record]:
    """The records of a probed model (``details["model"]`` set), in order."""
    return [r for r in records if isinstance(r.details, dict) and r.details.get("model") not in (None, "")]
