r"""Decision rules of the B3-B7 simulate presets, the operators of their controls, and the two
measurements (B3's one-step expansion, sphere-clusters' cluster counts) run on claim and control alike.

Each ``judge_*`` is the rule a preset states in its ``criterion``; the preset applies it to its own
measurements and, unchanged, to a control whose input makes the claim false (and, for B6, to one
whose input makes it true). The control operators:

- ``Repelling``: $x_t \mapsto x_t - s\,\nabla G(\beta x_t)$, attention with the sign of the step turned
  (tokens move away from those they attend to), so no clusters form (sphere-clusters);
- ``CyclicShift``: $x_{t,i} \mapsto x_{t,i+1 \bmod D}$; after LayerNorm it has no fixed point, since a
  fixed point would be a constant vector, which LayerNorm maps to zero (B7);
- ``GaussianRedraw``: $x \mapsto z$, $z_t \sim \mathcal N(0, I)$ i.i.d.: ends Gaussian by construction, so it
  checks that B6's Gaussianity tests accept Gaussian clouds at their level (B6, positive);
- ``PrintedRN``: Theorem 1's RN as printed, $\eta_0 + (\eta - \bar\eta)\,(\Lambda_0^{1/2}\bar S^{-1/2})^\top$
  with the raw second moment $\bar S = \mathbb E[\eta\eta^\top]$ in place of the covariance (B5).
"""

from __future__ import annotations

import math
from itertools import pairwise

import torch
from torch import Tensor, nn

from expattn.core.solvers import solve
from expattn.dynamics.clouds import count_clusters, make_cloud
from expattn.dynamics.metrics import gaussian_entropy, mean_distance_to_centroid, trace_cov
from expattn.dynamics.operators import AttentionConfig, AttentionUpdate, Compose
from expattn.dynamics.run import run
from expattn.nn.norms import NormConfig, build_norm, sym_power

ROUNDING = 1e-12  # relative float64 rounding allowance of a distance or a variance
AFFINE_TOL = 1e-12  # B5: relative error of A(eta) against mu + (I + Sigma) eta, float64 of O(1) numbers
Z_MEAN, Z_COV = 4.0, 4.5  # B5: largest |error| / Monte Carlo standard error over D and D^2 entries (~1e-4 each)
DRIFT_TOL = 1e-9  # B5: RN o A is the identity after the first step up to rounding of 100 iterations
FIXED_TOL = 1e-6  # B7: Broyden residual and distance of the iterate from Broyden's point, relative
KINDS = ("gaussian", "sphere", "anisotropic", "offcentre", "two_clusters")  # B3's start clouds
SYMMETRIC = ("gaussian", "sphere")  # the clouds B3 speaks of: centred, radially symmetric


def judge_expansion(table: dict[str, dict], min_ratio: float, symmetric: tuple[str, ...]) -> tuple[str, float]:
    """B3: ``pass`` iff the lowest 2.5% quantile of tr Cov(after)/tr Cov(before) over the settings whose
    cloud kind is in ``symmetric`` exceeds 1 and no cloud of any kind has a ratio below 1 - ``ROUNDING``.

    Returns the verdict and that lowest quantile.
    """
    lower = min(v["trace_ratio"]["q025"] for k, v in table.items() if k.split("/")[0] in symmetric)
    return ("pass" if lower > 1 and min_ratio >= 1 - ROUNDING else "fail"), lower


def judge_normalization(rows: list[dict], dim: int) -> str:
    """B4: ``pass`` iff every row's contraction factor (spread of N(A(x)) over spread of A(x)) is below 1
    and every row's median final tr Cov after iterating N o A stays at most ``2 dim``."""
    contracts = all(r["contraction_factor_max"] < 1 for r in rows)
    bounded = all(r["final_trace_cov_median"] <= 2 * dim for r in rows)
    return "pass" if contracts and bounded else "fail"


def judge_clusters(medians: list[float]) -> str:
    """sphere-clusters: ``pass`` iff the median cluster count never decreases as beta grows (``medians``
    in increasing beta) and the largest beta has strictly more clusters than the smallest."""
    rising = all(a <= b for a, b in pairwise(medians))
    return "pass" if rising and medians[-1] > medians[0] else "fail"


def judge_theorem1(affine_error: float, rows: list[dict]) -> str:
    """B5: ``pass`` iff A is the affine map to ``AFFINE_TOL`` and in every dimension the final cloud's mean
    and covariance are within ``Z_MEAN``/``Z_COV`` Monte Carlo standard errors of p_eq's, it passes the
    Gaussianity tests, and it moved less than ``DRIFT_TOL`` after the first iteration."""
    ok = all(
        r["final_mean_z"] <= Z_MEAN
        and r["final_cov_z"] <= Z_COV
        and r["final_is_gaussian"]
        and r["max_drift_after_first_iteration"] < DRIFT_TOL
        for r in rows
    )
    return "pass" if ok and affine_error <= AFFINE_TOL else "fail"


def judge_gaussianity(ends: list[tuple[str, bool]]) -> str:
    """B6: over the runs ``(start kind, ends Gaussian)`` that start non-Gaussian, ``supported`` iff all end
    Gaussian, ``not_supported`` iff none does, else ``inconclusive`` (Gaussian starts are not evidence)."""
    moved = [g for kind, g in ends if kind != "gaussian"]
    if all(moved):
        return "supported"
    return "not_supported" if not any(moved) else "inconclusive"


def judge_fixed_point(rows: list[dict], clouds: int) -> tuple[str, list[str]]:
    """B7: ``pass`` iff for at least one row (a weight gain) plain iteration reached a fixed point in all
    ``clouds`` clouds and Broyden's residual and its distance from the iterate are below ``FIXED_TOL``.

    Returns the verdict and the names of the rows that agree.
    """
    agree = [
        r["name"]
        for r in rows
        if r["iteration_reached_fixed_point"] == clouds
        and r["broyden_residual"] < FIXED_TOL
        and r["distance_iteration_vs_broyden"] < FIXED_TOL
    ]
    return ("pass" if agree else "fail"), agree


class Repelling(nn.Module):
    r"""$x \mapsto x - s\,\nabla G(\beta x)$: the attention step of ``attention`` with its sign turned."""

    def __init__(self, attention: AttentionUpdate) -> None:
        super().__init__()
        self.attention = attention

    def forward(self, x: Tensor) -> Tensor:
        return x - self.attention.config.step * self.attention.gradient(x)


class CyclicShift(nn.Module):
    r"""$x_{t,i} \mapsto x_{t,i+1 \bmod D}$ on ``(batch, token, dim)``."""

    def forward(self, x: Tensor) -> Tensor:
        return x.roll(-1, dims=-1)


class GaussianRedraw(nn.Module):
    r"""$x \mapsto z$, $z \sim \mathcal N(0, I)$ of the shape of ``x``, drawn from ``gen`` (float64)."""

    def __init__(self, gen: torch.Generator) -> None:
        super().__init__()
        self.gen = gen

    def forward(self, x: Tensor) -> Tensor:
        return torch.randn(x.shape, generator=self.gen, dtype=x.dtype)


class PrintedRN(nn.Module):
    r"""$\eta \mapsto \eta_0 + (\eta - \bar\eta)(\Lambda_0^{1/2}\bar S^{-1/2})^\top$, $\bar S = \eta^\top\eta / n$
    per cloud of ``(batch, n, dim)``: Theorem 1's RN as printed (raw second moment, not the covariance)."""

    def __init__(self, eta0: Tensor, lam0: Tensor) -> None:
        super().__init__()
        self.eta0, self.root = eta0, sym_power(lam0, 0.5)

    def forward(self, eta: Tensor) -> Tensor:
        raw = eta.mT @ eta / eta.shape[-2]
        scale = self.root @ torch.stack([sym_power(s, -0.5) for s in raw])
        return self.eta0 + (eta - eta.mean(-2, keepdim=True)) @ scale.mT


def _summary(values: torch.Tensor) -> dict[str, float]:
    """Mean and the 2.5%, 50%, 97.5% quantiles of ``values`` ``(batch,)``."""
    q = torch.quantile(values, torch.tensor([0.025, 0.5, 0.975], dtype=values.dtype))
    return {"mean": float(values.mean()), "q025": float(q[0]), "median": float(q[1]), "q975": float(q[2])}


def expansion_table(gen: torch.Generator, batch: int, tokens: int, residual: bool) -> tuple[dict, float, list[str]]:
    """One attention step on ``batch`` clouds per (kind, D, beta): quantiles of the trace, distance and
    entropy ratios, the smallest trace ratio of any cloud, and the settings with no visible expansion."""
    table, min_ratio, weak = {}, math.inf, []
    for kind in KINDS:
        for dim in (2, 16):
            for beta in (0.01, 0.1, 1.0, 10.0):
                x = make_cloud(kind, batch, tokens, dim, gen)
                y = AttentionUpdate(AttentionConfig(beta=beta, residual=residual))(x)
                ratio = trace_cov(y) / trace_cov(x)
                dist = mean_distance_to_centroid(y) / mean_distance_to_centroid(x)
                entropy = gaussian_entropy(y) - gaussian_entropy(x)
                min_ratio = min(min_ratio, float(ratio.min()))
                key = f"{kind}/D={dim}/beta={beta:g}"
                table[key] = {
                    "trace_ratio": _summary(ratio),
                    "distance_ratio": _summary(dist),
                    "entropy_gain": _summary(entropy),
                }
                if float(dist.median()) < 1.01:
                    weak.append(key)
    return table, min_ratio, weak


def cluster_counts(
    gen: torch.Generator, betas: tuple[float, ...], batch: int, tokens: int, steps: int, repel: bool = False
) -> tuple[dict, dict]:
    """Iterate sphere o attention (step 0.1; with its sign turned if ``repel``) from uniform clouds on the
    sphere in D = 3: per beta the (step, clusters per cloud) history and the final clouds."""
    dim, radius, every = 3, 0.01, max(1, steps // 40)
    sphere = build_norm("sphere", NormConfig(dim=dim))
    counts, finals = {}, {}
    for beta in betas:
        x = sphere(make_cloud("gaussian", batch, tokens, dim, gen))
        attention = AttentionUpdate(AttentionConfig(beta=beta, step=0.1))
        operator = Compose(Repelling(attention) if repel else attention, sphere)
        history = []
        with torch.no_grad():
            for k in range(steps + 1):
                if k % every == 0 or k == steps:
                    history.append((k, count_clusters(x, radius)))
                if k < steps:
                    x = operator(x)
        counts[beta], finals[beta] = history, x
    return counts, finals


def fixed_point_row(block: nn.Module, x: torch.Tensor, iters: int) -> dict:
    """``iters`` plain iterations of ``block`` from ``x`` ``(batch, tokens, D)`` and Broyden's method from the same
    start: how many clouds settled (step change < 1e-8), Broyden's residual, the relative distance between the two
    end points, the final token spread, and the per-step worst change ``(iters,)`` under ``step_change``."""
    traj = run(x, block, iters, metrics=["trace_cov"])
    with torch.no_grad():
        z, stats = solve(block, x, method="broyden", tol=1e-10, max_iter=100)
    scale = traj.final.flatten(1).norm(dim=-1).min()
    return {
        "iteration_reached_fixed_point": int((traj.step_change[-1] < 1e-8).sum()),
        "clouds": x.shape[0],
        "final_step_change_max": float(traj.step_change[-1].max()),
        "broyden_converged": stats.converged,
        "broyden_residual": stats.residual,
        "broyden_iterations": stats.iterations,
        "distance_iteration_vs_broyden": float((z - traj.final).flatten(1).norm(dim=-1).max() / scale),
        "final_token_spread": float(traj.metrics["trace_cov"][-1].max()),
        "step_change": traj.step_change.amax(-1),
    }
