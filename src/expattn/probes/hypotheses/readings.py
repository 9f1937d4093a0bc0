r"""The two readings of a spread ratio (E1, E2) and the known-answer maps that control them.

A map $x_t \mapsto y_t$ of a sequence's token states is read two ways:

$$\text{raw} = \frac{\operatorname{spread}(Y)}{\operatorname{spread}(X)},\qquad
\text{scale-free} = \frac{\operatorname{spread}(Y) / \overline{\lVert y\rVert^2}}
{\operatorname{spread}(X) / \overline{\lVert x\rVert^2}}$$

with $\operatorname{spread} = \operatorname{tr}\operatorname{Cov}$ per sequence (``common.second_moments``). The raw
reading is the seed's (the cloud's diameter, as in B3/B4) and decides the verdict; the scale-free one asks
whether the shape changes beyond an overall rescaling and gets its own verdict beside it. Controls with known
answers use the same rule: the map
$y_t = \bar x + f\,(x_t - \bar x)$ scales the cloud about its centroid, so from the measured spread
$s$ and mean squared norm $n$ of $X$ alone, exactly, $\operatorname{spread}(Y) = f^2 s$ and
$\overline{\lVert y\rVert^2} = n - s + f^2 s$: it contracts for $f < 1$ and expands for $f > 1$.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float
from torch import Tensor

from expattn.probes.hypotheses.base import majority_verdict

SHRINK, GROW = 0.5, 1.5  # factors of the control maps about the centroid


def scaled(
    spread: Float[Tensor, "*batch"], msn: Float[Tensor, "*batch"], factor: float
) -> tuple[Float[Tensor, "*batch"], Float[Tensor, "*batch"]]:
    r"""Spread and mean squared norm of $\bar x + f(x - \bar x)$ from those of $x$ (exact, see module); per
    sequence, ``(batch,)`` (any shape: elementwise)."""
    return factor**2 * spread, msn - spread + factor**2 * spread


def readings(
    sb: Float[Tensor, "*batch"], sa: Float[Tensor, "*batch"], nb: Float[Tensor, "*batch"], na: Float[Tensor, "*batch"]
) -> tuple[Float[Tensor, "*batch"], Float[Tensor, "*batch"]]:
    """Raw and scale-free ratios of a map from the spreads ``sb, sa`` and mean squared norms ``nb, na``
    before and after it; per sequence, ``(batch,)`` (any shape: elementwise)."""
    return sa / sb, (sa / na) / (sb / nb)


def _growth(lo: np.ndarray, hi: np.ndarray, lo_margin: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per unit (elementwise): expanding (interval above 1, and the margin's above 0 where given), contracting."""
    above = lo > 1 if lo_margin is None else (lo > 1) & (lo_margin > 0)
    return above, hi < 1


def growth_verdict(
    lo: np.ndarray, hi: np.ndarray, lo_margin: np.ndarray | None = None, replicas: tuple | None = None
) -> str:
    """``supported`` (the map expands) when in most units the ratio's 95% interval lies above 1 (and the
    margin over a null above 0, where given); ``not_supported`` when in most it lies below 1. ``replicas``:
    the same arguments ``(lo, hi[, lo_margin])`` per bootstrap replicate, ``(R, n)`` each
    (``base.replicate_intervals``): a majority whose count's interval reaches half the units is inconclusive."""
    reps = () if replicas is None else _growth(replicas[0], replicas[1], replicas[2] if len(replicas) > 2 else None)
    return majority_verdict(*_growth(lo, hi, lo_margin), *reps)


def contraction_verdict(lo: np.ndarray, hi: np.ndarray, replicas: tuple | None = None) -> str:
    """``supported`` (the map contracts) when in most units the 95% interval lies below 1;
    ``not_supported`` when in most it lies above 1 (``replicas`` as in ``growth_verdict``)."""
    above, below = _growth(lo, hi, None)
    reps = () if replicas is None else _growth(replicas[0], replicas[1], None)[::-1]
    return majority_verdict(below, above, *reps)
