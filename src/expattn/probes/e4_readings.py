r"""The seed's readings of a head's bilinear form, compared on the range of $\Sigma$ (E4, E9).

Seed 000 reads $W_q^\top W_k$ two ways: §3.2 (claim A11) $W_q^\top W_k \approx \Sigma^{-1}$ (the matched key of a
Gaussian carrier), §6 $W_q^\top W_k \approx$ the Fisher matrix $\nabla^2\log Z$, which is $\Sigma$ for a Gaussian
carrier. Each reading has a model-free target built from $\Sigma$ and one built from the head's own attention
Fisher $F_h = E_i\operatorname{Cov}_{p_h(j\mid i)}[x_j]$:

| reading | target | rival |
|---|---|---|
| ``sigma_inv`` | $\Sigma^{+}$ | $\Sigma$ |
| ``sigma`` | $\Sigma$ | $\Sigma^{+}$ |
| ``fisher_inv`` | $(F_h + \lambda_F I)^{-1}$ | $F_h$ |
| ``fisher`` | $F_h$ | $(F_h + \lambda_F I)^{-1}$ |

**On the range of $\Sigma$.** LayerNorm outputs lie on a hyperplane, so $\Sigma$ can be exactly singular and any
ridge inverse would weight the direction the data never vary along most. With
$\Sigma = U\operatorname{diag}(\lambda)U^\top$ and $U_r$ the eigenvectors with $\lambda_k > \tau\lambda_{\max}$,
$\tau = 10^{-6}$, everything is compared in range coordinates:

$$\tilde A_h = U_r^\top\operatorname{sym}(W_{q,h}^\top W_{k,h})U_r,\quad \Sigma \to \operatorname{diag}(\lambda_r),\quad
\Sigma^{+} \to \operatorname{diag}(\lambda_r^{-1}),\quad F_h \to U_r^\top F_h U_r,\quad
\lambda_F = 10^{-2}\operatorname{tr}(U_r^\top F_h U_r)/r.$$

The form's part outside the range only adds a per-query constant to the logits of keys that differ within the
range, which the softmax cancels. $\tau$ sits far above float64 eigen-solver rounding ($\sim10^{-16}D$) and the
float32-statistics rounding ($\sim10^{-7}$), and below the smallest genuine eigenvalues of the probed models
(recorded per layer as ``sigma_rank`` and ``range_gap``: the largest dropped over the smallest kept eigenvalue).

**Margin and rule.** Per head
$m_h = \cos(\tilde A_h, T) - \max(\cos(\tilde A_h, T'), \cos(\tilde A_h, I_r), q_{95}(r))$ with $T$ the target, $T'$
its rival and $q_{95}(r)$ the random form's 95th percentile (``random_q95``); a reading is supported when the 95%
bootstrap interval over heads (all layers pooled) of the mean margin lies above 0, not supported below 0. Its
negative control is random heads $\operatorname{sym}(R_q^\top R_k)$ in range coordinates (Gaussian $R$ of the head's
shape: an orthonormal $U_r$ keeps them Gaussian) through the same margin and rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

RANGE_TOL = 1e-6
BOOTSTRAP = 2000


@dataclass(frozen=True)
class Reading:
    """One reading of $W_q^\\top W_k$: its target, the rival it must beat, and how the report names it."""

    name: str
    target: str
    rival: str
    label: str
    source: str


READINGS = {
    r.name: r
    for r in (
        Reading("sigma_inv", "sigma_inv", "sigma", "Sigma^+ (pseudo-inverse) on the range of Sigma", "seed 000 §3.2"),
        Reading("sigma", "sigma", "sigma_inv", "Sigma (the Gaussian carrier's Fisher matrix)", "seed 000 §6"),
        Reading("fisher_inv", "fisher_inv", "fisher", "inverse attention Fisher (F_h + lambda I)^-1", "seed 000 §3.2"),
        Reading("fisher", "fisher", "fisher_inv", "attention Fisher F_h = E_i Cov_p(j|i)[x_j]", "seed 000 §6"),
    )
}


def range_basis(sigma: Tensor) -> tuple[Tensor, Tensor, float]:
    """Eigenvalues $\\lambda_r$ ``(r,)`` and eigenvectors $U_r$ ``(D, r)`` (float64) of the range of the symmetric
    ``sigma`` ``(D, D)``, and the gap: largest dropped over smallest kept eigenvalue (0 when none is dropped)."""
    e, v = torch.linalg.eigh(sigma.double())
    keep = e > RANGE_TOL * e[-1]
    gap = float(e[~keep].abs().max() / e[keep].min()) if bool((~keep).any()) else 0.0
    return e[keep], v[:, keep], gap


def sym_cos(u: Tensor, v: Tensor, b: Tensor | None) -> Tensor:
    """$\\cos(\\operatorname{sym}(u^\\top v), B)$ for ``u, v`` of shape ``(..., r, D)``, batched over the leading dims,
    without forming the ``(D, D)`` product. ``B``: symmetric ``(..., D, D)``, a diagonal given as its ``(D,)``
    entries, or ``None`` for the identity:
    $\\langle u^\\top v, B\\rangle = \\sum (uB)\\odot v$ and
    $\\lVert\\operatorname{sym}(u^\\top v)\\rVert^2 =
    \\tfrac12(\\langle uu^\\top, vv^\\top\\rangle + \\langle vu^\\top, uv^\\top\\rangle)$."""
    if b is None:
        inner, b_norm = (u * v).sum((-1, -2)), u.shape[-1] ** 0.5
    elif b.ndim == 1:
        inner, b_norm = (u * b * v).sum((-1, -2)), torch.linalg.vector_norm(b)
    else:
        inner, b_norm = ((u @ b) * v).sum((-1, -2)), torch.linalg.matrix_norm(b)
    vu = v @ u.mT
    sym_sq = ((u @ u.mT) * (v @ v.mT)).sum((-1, -2)) + (vu * vu.mT).sum((-1, -2))
    return inner / ((sym_sq / 2).sqrt() * b_norm)


def random_q95(dim: int) -> float:
    """95th percentile of $\\cos(\\operatorname{sym}(R_q^\\top R_k), B)$ for Gaussian $R$ of width ``dim``: the inner
    product has variance $r\\lVert B\\rVert_F^2$ and $E\\lVert\\operatorname{sym}(R_q^\\top R_k)\\rVert_F^2 =
    r D(D+1)/2$, so the cosine is about $N(0, 2/(D(D+1)))$ whatever $B$ and the rank $r$ (checked by Monte Carlo)."""
    return 1.6449 * (2.0 / (dim * (dim + 1))) ** 0.5


def margin_verdict(low: float, high: float) -> str:
    """``supported`` when the margin's interval lies above 0, ``not_supported`` when below, else ``inconclusive``."""
    return "supported" if low > 0 else "not_supported" if high < 0 else "inconclusive"


def margins(cos: dict[str, np.ndarray], q95: np.ndarray, reading: Reading) -> np.ndarray:
    """$m_h$ of ``reading`` from per-head cosines ``cos[key]`` ``(L, H)`` (keys: the four targets and
    ``identity``) and the per-layer random percentile ``q95`` ``(L,)``."""
    chance = np.broadcast_to(q95[:, None], cos["identity"].shape)
    best = np.maximum.reduce([cos[reading.rival], cos["identity"], chance])
    return cos[reading.target] - best


def mean_interval(values: np.ndarray, rng: np.random.Generator) -> tuple[float, float, float]:
    """Mean of ``values`` (all entries pooled) and its 95% percentile-bootstrap interval (``BOOTSTRAP`` resamples)."""
    flat = values.ravel()
    boot = flat[rng.integers(0, flat.size, (BOOTSTRAP, flat.size))].mean(1)
    low, high = np.quantile(boot, [0.025, 0.975])
    return float(flat.mean()), float(low), float(high)


def judge_reading(reading: Reading, cos: dict[str, np.ndarray], control: dict[str, np.ndarray], q95: np.ndarray,
                  rng: np.random.Generator) -> dict:
    """The rule of the module docstring applied to the model's heads (``cos``) and to the random heads
    (``control``, same keys): verdict, mean margin with its interval, heads above their baselines, and the
    control's verdict and interval."""
    m = margins(cos, q95, reading)
    mean, low, high = mean_interval(m, rng)
    c_mean, c_low, c_high = mean_interval(margins(control, q95, reading), rng)
    return {
        "target": reading.label,
        "source": reading.source,
        "verdict": margin_verdict(low, high),
        "mean_margin": mean,
        "low": low,
        "high": high,
        "heads_aligned": int((m > 0).sum()),
        "heads": int(m.size),
        "margin": m.tolist(),
        "control": {"verdict": margin_verdict(c_low, c_high), "mean_margin": c_mean, "low": c_low, "high": c_high},
    }
