r"""Where E4's and E9's support lies in the target's spectrum, and the forms that test the rule at its edges.

The rule deflates the target's top $k$ eigen-directions (``e4_readings.DECIDING``); a $k$ applies when $3k \le D$
(``applicable``: at least two thirds of the width remain). The controls in range coordinates, rows ``(rows, r)`` with
form $\operatorname{sym}(u^\top v)$:

- negative: the target truncated to its top ``rank`` directions (``e4_readings.top_form``);
- positive: the target $T$ itself, and $T + c\,\lVert T\rVert_F\,N/\lVert N\rVert_F$ with
  $N = \operatorname{sym}(R_q^\top R_k)$ a random head of ``rows`` Gaussian rows and $c$ in ``NOISE``
  (``noisy_forms``: $u = [T^{1/2};\ \alpha R_q]$, $v = [T^{1/2};\ \alpha R_k]$, $\alpha^2 = c\lVert T\rVert_F /
  \lVert N\rVert_F$).

The support is reported as ``support_k``, the largest $k$ whose deflated interval lies above 0, with the fraction
of $\Sigma$'s trace its top $k$ directions carry (``trace_fraction``).
"""

from __future__ import annotations

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.hypotheses.e4_readings import (
    DEFLATIONS,
    RANGE_TOL,
    RANKS,
    TOLERANCES,
    Reading,
    margin_verdict,
    margins,
    mean_interval,
    sym_norm,
    top_form,
)

NOISE = (0.3, 1.0)  # the positive controls' random part, as a fraction of the target's Frobenius norm
CONTROLS = {"random": "random heads sym(R_q^T R_k) of the same shape",
            "top": "rank-one form u_1 u_1^T of the target's top eigen-direction",
            **{f"top{k}": f"top-PC form of rank {k} (the target truncated to its top {k} eigen-directions)"
               for k in RANKS[1:]},
            "target": "the target itself",
            **{f"noise{c:g}": f"the target plus a random head of {c:g} times its norm" for c in NOISE}}
POSITIVE = ("target", *(f"noise{c:g}" for c in NOISE))  # the controls that must stay supported


def applicable(ks: tuple[int, ...], width: int) -> tuple[int, ...]:
    r"""The deflations ``ks`` with $3k \le$ ``width``; for the truncation ranks ``RANKS``, those up to the largest
    applicable deflation (a truncation deeper than every deflation would be a reading of what remains)."""
    if ks == RANKS:
        deepest = max(applicable(DEFLATIONS, width), default=0)
        return tuple(k for k in ks if k <= deepest)
    return tuple(k for k in ks if 3 * k <= width)


def noisy_forms(spectrum: Float[Tensor, " r"], rows: int, gen: torch.Generator
                ) -> dict[str, tuple[Tensor, Tensor]]:
    """The positive controls ``{"target": (u, u), "noise<c>": (u, v)}`` for a diagonal target ``spectrum`` ``(r,)``:
    rows ``(1, r + rows, r)`` (module docstring); the random rows drawn on the CPU from ``gen``."""
    r = spectrum.numel()
    root = top_form(spectrum.cpu(), r)  # (1, r, r): sqrt of the whole target
    out = {"target": (root, root)}
    for c in NOISE:
        rq, rk = torch.randn(2, 1, rows, r, generator=gen)
        alpha = (c * torch.linalg.vector_norm(spectrum.cpu().float()) / sym_norm(rq, rk)).sqrt().view(-1, 1, 1)
        out[f"noise{c:g}"] = (torch.cat([root, alpha * rq], -2), torch.cat([root, alpha * rk], -2))
    return {name: (u.to(spectrum.device), v.to(spectrum.device)) for name, (u, v) in out.items()}


def trace_fraction(spectrum: Float[Tensor, " r"], ks: tuple[int, ...]) -> dict[int, float]:
    """Per ``k``, the fraction of the trace of a positive ``spectrum`` ``(r,)`` its top ``k`` entries carry."""
    top = spectrum.double().sort(descending=True).values.cumsum(0)
    return {k: float(top[min(k, top.numel()) - 1] / top[-1]) for k in ks}


def support_k(judged: dict, ks: tuple[int, ...]) -> int | None:
    """The largest ``k`` whose deflated interval (``judged[f"deflated_{k}"]``) lies above 0, when every smaller one
    and the undeflated one do too; 0 when only the undeflated one does; None when not even that."""
    if not judged["low"] > 0:
        return None
    best = 0
    for k in sorted(ks):
        if not judged[f"deflated_{k}"]["low"] > 0:
            break
        best = k
    return best


def mean_fractions(fractions: list[dict[int, float]]) -> dict[str, float]:
    """The layers' mean of ``trace_fraction``, keyed ``top<k>`` for the record."""
    return {f"top{k}": float(np.mean([f[k] for f in fractions])) for k in fractions[0]}


def range_tolerances(layers: list[dict], headline: Reading, rng: np.random.Generator) -> dict:
    """The headline reading's margin over the rival, the identity and the random forms at every cut of the range
    (``RANGE_TOL`` and ``TOLERANCES``), with the layers' interval and verdict."""
    tolerance = {}
    for tol in (RANGE_TOL, *TOLERANCES):
        at = [lay[f"tolerance_{tol:g}"] for lay in layers] if tol != RANGE_TOL else [
            {"rank": lay["sigma_rank"], "q95": lay["random_q95"], "cos": {k: lay[f"cos_{k}"] for k in
                                                                        ("sigma_inv", "sigma", "identity")}}
            for lay in layers]
        m = margins({k: np.stack([a["cos"][k] for a in at]) for k in at[0]["cos"]},
                    np.array([a["q95"] for a in at]), headline)
        mean, low, high = mean_interval(m, rng)
        tolerance[f"{tol:g}"] = {"sigma_rank_min": min(a["rank"] for a in at), "mean_margin": mean, "low": low,
                                 "high": high, "verdict": margin_verdict(low, high)}
    return tolerance


def own_over_best_other(table: np.ndarray) -> np.ndarray:
    """``table`` ``(..., N', N)``: the cosine of unit ``n`` with target ``n'`` (its own at ``n' = n``). Returns its
    own cosine minus its best other one, ``(..., N)`` (``-inf`` with a single target)."""
    n = table.shape[-1]
    own = table[..., np.arange(n), np.arange(n)]
    return own - np.where(np.eye(n, dtype=bool), -np.inf, table).max(-2)


def specificity(margin: np.ndarray, count: str, name: str, rng: np.random.Generator) -> dict[str, float]:
    """``{count: heads whose own target wins, name: mean margin, name_low, name_high}`` for per-head margins
    ``(L, H)`` of ``own_over_best_other`` (intervals by ``mean_interval``); ``{}`` when there is no other target."""
    if not np.isfinite(margin).all():
        return {}
    mean, low, high = mean_interval(margin, rng)
    return {count: int((margin > 0).sum()), name: mean, f"{name}_low": low, f"{name}_high": high}


def bilinear_form(bq: Float[Tensor, " inner"] | None, bk: Float[Tensor, " inner"] | None) -> str:
    r"""What E4 and E9 compare on a model with query/key biases ``bq``, ``bk`` (None: none). In homogeneous
    coordinates the logit of query state $x$ and key state $y$ is $[x; 1]^\top M [y; 1]$ with
    $M = \begin{pmatrix} W_q^\top W_k & W_q^\top b_k \\ b_q^\top W_k & b_q^\top b_k \end{pmatrix}$: the readings
    compare its $x$-$y$ block $W_q^\top W_k$, the only part quadratic in the states (the seed's form)."""
    if bq is None and bk is None:
        return "no query/key biases: the logits' bilinear form is W_q^T W_k"
    return ("query/key biases: logits = [x; 1]^T M [y; 1], M = [[W_q^T W_k, W_q^T b_k], [b_q^T W_k, b_q^T b_k]]; "
            "the readings compare its x-y block W_q^T W_k; x^T W_q^T b_k and b_q^T b_k are constant over the keys "
            "and cancel in the softmax; the per-key term b_q^T W_k y is not part of the compared form")
