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
float32-statistics rounding ($\sim10^{-7}$), and below the smallest genuine eigenvalues
of MiniLM, whose one dropped direction (the hyperplane's normal) sits 1e-7 below the smallest kept eigenvalue
(recorded per layer as ``sigma_rank`` and ``range_gap``: the largest dropped over the smallest kept eigenvalue).
Where the spectrum runs on through $\tau$ without a gap (SmolLM2's first layers: ``range_gap`` near 1) the cut is a
regularisation, not the exact range: the headline reading is therefore repeated at $\tau = 10^{-8}$ and $10^{-4}$
(``TOLERANCES``; ``details["range_tolerance"]``: its margin over the rival, the identity and the random forms, with
the layers' interval, at $\tau = 10^{-6}$ too) to show whether the verdict depends on it.

**Margin and rule.** Per head
$m_h = \cos(\tilde A_h, T) - \max(\cos(\tilde A_h, T'), \cos(\tilde A_h, I_r), \cos(\tilde A_h, Q\Lambda_T Q^\top),
q_{95}(r))$ with $T$ the target, $T'$ its rival, $Q\Lambda_T Q^\top$ the target's spectrum on Haar-random
eigenvectors (one draw per layer, shared by the readings and the deflations; ``haar``) and $q_{95}(r)$ the random
form's 95th percentile (``random_q95``).
$\Sigma$ is dominated by its top eigenvector, so a head that reads only that direction, $u_1u_1^\top$, beats every
rival by $\lambda_1/\lVert\Sigma\rVert_F$. The **deflated margin** $m_h^{(k)}$ is $m_h$ recomputed with the target's
top-$k$ eigen-directions projected out of the target, the rival and the identity, and the spectrum rival built from
the deflated target (``deflated``; $k$ in ``DEFLATIONS``). The head's form is kept whole: its part along those
directions no longer adds to the inner products but still counts in its norm, so $u_1u_1^\top$ has cosine 0 with
every deflated target ($m^{(1)} \le -q_{95} < 0$, the random form's percentile being the same for any target), and so
has, nearly, a head that reads the top direction of the population while the sample's $u_1$ is off by a few degrees
(deflating the form too would leave only that error, whose cosine with the deflated $\Sigma$ is large: it lies along
$u_2$).
A $\Sigma$ reading is supported when the 95% intervals of the means of $m_h$ and $m_h^{(k)}$, $k$ = 1, 5, 20, all lie
above 0, not supported when any lies below 0 (``DECIDING``; fixed $k$, the same for every model, each where
$3k \le D$, ``e4_support.applicable``): $k = 1$ removes the trivial explanation, $k = 5$ the low-rank ones, $k = 20$
the principal subspace. The target truncated to its top 1, 2, 5, 10, 20 directions (``RANKS``) are negative controls
($k = 2$ is reported). $T^2$ and $T^{1/2}$ (``POWERS``) are rivals: the seed's claim is about $\Sigma$ itself, not its
eigenbasis. The target itself and the target plus a random form of
0.3 and 1.0 times its norm are positive controls (``e4_support``), which must stay supported. The Fisher
readings (no powers, no positive controls) have a target per head, $F_h$ and $\lambda_F(F_h + \lambda_F I)^{-1}$
(``e4_fisher``: on a CPU from one float32 eigendecomposition of $F_h$, elsewhere a float32 Cholesky inverse,
``regularised_inverse``; $F_h$'s negative eigenvalues are clipped): the same margins and rule with dense targets
in range coordinates (``e4_dense``), each target's top-$k$ eigenvectors (on an
accelerator from an iterative solver, ``core.top_eigen``, residual tolerance $10^{-5}\lVert M\rVert_F$; a head it
leaves unconverged makes the Fisher readings inconclusive, ``fisher_unconverged``) deflated per head, its spectrum
put on random eigenvectors as $Q F_h Q^\top$ (Haar-random as $Q$ is: no eigenvectors needed), and its
rank-one control the form of each head's own top direction. Heads of a layer share its input, so the intervals
resample layers, then heads within each drawn layer (``mean_interval``). Negative controls through the same rule:
random heads $\operatorname{sym}(R_q^\top R_k)$ in range coordinates (Gaussian $R$ of the head's shape: an
orthonormal $U_r$ keeps them Gaussian), and the target's truncations to its top 1, 2, 5 directions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

RANGE_TOL = 1e-6
TOLERANCES = (1e-8, 1e-4)
BOOTSTRAP = 2000
DEFLATIONS = (1, 2, 5, 20)
DECIDING = (1, 5, 20)  # the deflations the rule reads: no explanation by the target's top 20 directions or fewer
RANKS = (1, 2, 5, 10, 20)  # the negative controls' truncations of the target: its top 1, 2, 5, 10, 20 directions
POWERS = (2.0, 0.5)  # monotone functions of the target, rivals of the target itself: T^2 and T^(1/2)
WEAK = 0.5  # cos^2 below which the target explains less than half of every head's squared norm


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


def range_basis(
    e: Float[Tensor, " dim"], v: Float[Tensor, "dim dim"], tol: float = RANGE_TOL
) -> tuple[Float[Tensor, " r"], Float[Tensor, "dim r"], float]:
    """Eigenvalues $\\lambda_r$ ``(r,)`` and eigenvectors $U_r$ ``(D, r)`` of the range of a symmetric matrix, from its
    eigendecomposition ``e`` ``(D,)`` (ascending), ``v`` ``(D, D)``: the eigenvalues above ``tol`` times the largest;
    and the gap: largest dropped over smallest kept eigenvalue in absolute value (0 when none is dropped)."""
    keep = e > tol * e[-1]
    gap = float(e[~keep].abs().max() / e[keep].min()) if bool((~keep).any()) else 0.0
    return e[keep], v[:, keep], gap


def sym_norm(u: Float[Tensor, "*batch r dim"], v: Float[Tensor, "*batch r dim"]) -> Float[Tensor, "*batch"]:
    """$\\lVert\\operatorname{sym}(u^\\top v)\\rVert_F$ for ``u, v`` of shape ``(..., r, D)``; with fewer rows than
    columns without forming the ``(D, D)`` product: $\\lVert\\operatorname{sym}(u^\\top v)\\rVert^2 =
    \\tfrac12(\\langle uu^\\top, vv^\\top\\rangle + \\langle vu^\\top, uv^\\top\\rangle)$ ($3r^2D$ multiply-adds);
    with at least as many rows as columns ($r \\ge D$: the positive controls' rows) from the product itself ($rD^2$)."""
    if u.shape[-2] >= u.shape[-1]:
        a = u.mT @ v
        return (a + a.mT).square().sum((-1, -2)).sqrt() / 2  # torch's sum: float32's matrix_norm is off by ~1e-4
    vu = v @ u.mT
    return ((((u @ u.mT) * (v @ v.mT)).sum((-1, -2)) + (vu * vu.mT).sum((-1, -2))) / 2).sqrt()


def sym_cos(
    u: Float[Tensor, "*batch r dim"],
    v: Float[Tensor, "*batch r dim"],
    b: Float[Tensor, "*batch dim dim"] | Float[Tensor, " dim"] | None,
    norm: Float[Tensor, "*batch"] | None = None,
) -> Float[Tensor, "*batch"]:
    """$\\cos(\\operatorname{sym}(u^\\top v), B)$ for ``u, v`` of shape ``(..., r, D)``, batched over the leading dims,
    without forming the ``(D, D)`` product. ``B``: symmetric ``(..., D, D)``, a diagonal given as its ``(D,)``
    entries, or ``None`` for the identity: $\\langle u^\\top v, B\\rangle = \\sum (uB)\\odot v$; ``norm``:
    ``sym_norm(u, v)`` when the caller has it. The zero form has cosine 0."""
    if b is None:
        inner, b_norm = (u * v).sum((-1, -2)), u.shape[-1] ** 0.5
    elif b.ndim == 1:
        return sym_cos_diagonal(u, v, b, norm)
    else:
        inner, b_norm = ((u @ b) * v).sum((-1, -2)), torch.linalg.matrix_norm(b)
    norm = (sym_norm(u, v) if norm is None else norm) * b_norm
    return torch.where(norm > 0, inner / norm.clamp_min(torch.finfo(norm.dtype).tiny), 0.0)


def sym_cos_diagonal(
    u: Float[Tensor, "*batch rows r"],
    v: Float[Tensor, "*batch rows r"],
    d: Float[Tensor, "*batch r"],
    norm: Float[Tensor, "*batch"] | None = None,
) -> Float[Tensor, "*batch"]:
    r"""$\cos(\operatorname{sym}(u^\top v), \operatorname{diag}(d))$ for ``u, v`` ``(..., rows, r)`` and diagonals
    ``d`` ``(..., r)``, both batched over (broadcast) leading dims (``norm``: ``sym_norm(u, v)`` when the caller has
    it), through ``diagonal_cos`` of the rows' products $s_b = \sum_a u_{ab} v_{ab}$."""
    return diagonal_cos((u * v).sum(-2), d, sym_norm(u, v) if norm is None else norm)


def diagonal_cos(s: Float[Tensor, "*batch r"], d: Float[Tensor, "*batch r"], norm: Float[Tensor, "*batch"]
                 ) -> Float[Tensor, "*batch"]:
    r"""$\cos(\operatorname{sym}(u^\top v), \operatorname{diag}(d)) = \sum_b s_b d_b \,/\,
    (\lVert\operatorname{sym}(u^\top v)\rVert_F \lVert d\rVert_2)$ from the rows' products
    $s_b = \sum_a u_{ab} v_{ab}$ ``(..., r)`` and ``norm`` $= \lVert\operatorname{sym}(u^\top v)\rVert_F$: a
    form's $s$ serves every diagonal target. The zero form or the zero diagonal has cosine 0."""
    inner = (s * d).sum(-1)
    norm = norm * torch.linalg.vector_norm(d, dim=-1)
    return torch.where(norm > 0, inner / norm.clamp_min(torch.finfo(norm.dtype).tiny), 0.0)


def random_q95(dim: int) -> float:
    """95th percentile of $\\cos(\\operatorname{sym}(R_q^\\top R_k), B)$ for Gaussian $R$ of width ``dim``: the inner
    product has variance $r\\lVert B\\rVert_F^2$ and $E\\lVert\\operatorname{sym}(R_q^\\top R_k)\\rVert_F^2 =
    r D(D+1)/2$, so the cosine is about $N(0, 2/(D(D+1)))$ whatever $B$ and the rank $r$ (checked by Monte Carlo)."""
    return 1.6449 * (2.0 / (dim * (dim + 1))) ** 0.5


def haar(r: int, gen: torch.Generator, device: torch.device | str = "cpu") -> Float[Tensor, "r r"]:
    """A Haar-random orthogonal ``(r, r)`` float64 matrix on ``device``: QR of a Gaussian drawn on the CPU from
    ``gen`` (the same draw on every device), factorised on ``device`` (a 2048-wide QR takes 0.14 s of a GPU run's
    host otherwise), the signs of R's diagonal moved into Q."""
    q, rr = torch.linalg.qr(torch.randn(r, r, generator=gen, dtype=torch.float64).to(device))
    return q * torch.sign(torch.diagonal(rr))


def top_form(spectrum: Float[Tensor, "*batch r"], rank: int = 1) -> Float[Tensor, "*batch rank r"]:
    r"""The target truncated to its top ``rank`` directions, $\sum_{i \le \text{rank}} t_i e_i e_i^\top$, as rows
    ``(..., rank, r)`` for ``sym_cos`` (row $i$: $\sqrt{t_i}$ at the $i$-th largest entry of ``spectrum``
    ``(..., r)``, so that rows$^\top$rows is the truncation; a leading dim of 1 when it has none). Rank 1 is the
    rank-one form $e_1 e_1^\top$ of the top direction (scaled: the cosines do not see it)."""
    lead = spectrum.shape[:-1] or (1,)
    flat = spectrum.reshape(*lead, spectrum.shape[-1])
    top = flat.argsort(-1, descending=True)[..., :rank].unsqueeze(-1)  # (..., rank, 1)
    weight = flat.unsqueeze(-2).expand(*lead, rank, -1).gather(-1, top).clamp_min(0).sqrt()
    return torch.zeros(*lead, rank, flat.shape[-1], device=spectrum.device).scatter_(-1, top, weight.float())


def _columns(u: Float[Tensor, "*batch rows r"], order: Int[Tensor, "*batch k"]) -> Float[Tensor, "*batch rows k"]:
    """The columns ``order`` of the rows ``u`` (``order``'s leading dims broadcast against ``u``'s)."""
    at = order.unsqueeze(-2)
    return torch.take_along_dim(u, at.view((1,) * (u.ndim - at.ndim) + tuple(at.shape)), -1)


def deflated(heads: dict[str, tuple[Tensor, Tensor, Tensor, Tensor]], spectra: dict[str, Tensor], reading: Reading,
             ks: tuple[int, ...], q: Float[Tensor, "r r"]) -> dict[int, dict[str, dict[str, Tensor]]]:
    r"""Per $k$ in ``ks`` (0: none), cosines of each set of heads $A = \operatorname{sym}(u^\top v)$ with the targets
    of ``reading``, each with the reading's target's top-$k$ eigen-directions projected out: $P T P$ with $P$ the
    projector on the other directions, in the eigen-coordinates shared by the target and its rival, where both are
    diagonal: ``spectra[name]`` ``(..., r)`` (range coordinates for the $\Sigma$ readings, ``(r,)``; each head's
    $F_h$ eigenvectors, ``(H, r)``). ``heads[name] = (u, v, uQ, vQ)``: rows ``(..., rows, r)`` in those coordinates,
    and the same rotated by the Haar-random orthogonal ``q`` $Q$ (``haar``). Per name, keys: the target, the rival,
    ``identity`` ($P$), ``power<p>_<target>`` ($P T^p P$, ``POWERS``) and ``haar_<target>``, $P Q D Q^\top P$ with
    $D = PTP$: the deflated target's spectrum on random directions within the kept ones, so that, like the target,
    it does not see $A$'s part along the deflated directions ($\langle A, PQDQ^\top P\rangle =
    \sum ((uP)Q) D \odot ((vP)Q)$, $(uP)Q = uQ - u_t Q_t$, $\lVert PQDQ^\top P\rVert^2 = \lVert D\rVert^2 -
    2\lVert Q_t D\rVert^2 + \lVert Q_t D Q_t^\top\rVert^2$ with $Q_t$ the rows of $Q$ and $u_t$ the columns of $u$
    at the deflated directions); each ``(...)``. A set's norm and rows' products (``diagonal_cos``) are formed once
    for every $k$ and target: each $k$ costs $O(\text{rows}\,r\,k)$."""
    top = spectra[reading.target].argsort(-1, descending=True)
    sets = {name: (u, v, uq, vq, sym_norm(u, v), (u * v).sum(-2)) for name, (u, v, uq, vq) in heads.items()}
    q = q.float()  # the targets' dtype
    out: dict[int, dict[str, dict[str, Tensor]]] = {}
    for k in ks:
        order = top[..., :k]
        mask = torch.ones_like(spectra[reading.target]).scatter_(-1, order, 0.0)
        targets = {reading.target: spectra[reading.target] * mask, reading.rival: spectra[reading.rival] * mask,
                   "identity": mask}
        targets |= {f"power{p:g}_{reading.target}": spectra[reading.target].clamp_min(0) ** p * mask for p in POWERS}
        targets = {key: t.float() for key, t in targets.items()}
        d, qt = targets[reading.target], q[order]  # Q_t: (..., k, r)
        qd = qt * d.unsqueeze(-2)  # (..., k, r): Q_t D
        haar_norm = (d.square().sum(-1) - 2 * qd.square().sum((-1, -2)) + (qd @ qt.mT).square().sum((-1, -2)))
        out[k] = {}
        for name, (u, v, uq, vq, norm, s) in sets.items():  # the form is kept whole: one norm for every target
            out[k][name] = {key: diagonal_cos(s, t, norm) for key, t in targets.items()}
            upq = uq - _columns(u, order) @ qt.to(u.dtype) if k else uq  # (uP)Q
            vpq = vq - _columns(v, order) @ qt.to(v.dtype) if k else vq
            inner = ((upq * vpq).sum(-2) * d).sum(-1)
            scale = norm * haar_norm.clamp_min(0).sqrt()
            out[k][name][f"haar_{reading.target}"] = torch.where(scale > 0, inner / scale.clamp_min(1e-30), 0.0)
    return out


def full_cos(
    wq: Float[Tensor, "heads head_dim dim"],
    wk: Float[Tensor, "heads head_dim dim"],
    targets: dict[str, Float[Tensor, "layers dim dim"]],
) -> dict[str, Float[Tensor, "layers heads"]]:
    r"""$\cos(\operatorname{sym}(W_{q,h}^\top W_{k,h}), T_l)$ ``(L, H)`` for the heads' ``wq, wk`` ``(H, dh, D)``
    and each stack of symmetric ``targets[name]`` ``(L, D, D)``. A symmetric $T$ sees only the symmetric part,
    $\langle T, \operatorname{sym}(A)\rangle = \langle T, A\rangle$, so the heads' products $A_h = W_{q,h}^\top
    W_{k,h}$ are taken as they are, ``L`` at a time (no more memory than one stack), with one product of each stack
    with them ($H L D^2$ multiply-adds instead of ``sym_cos``'s $H L\,d_h D^2$, each stack read once per ``L``
    heads), and the norms from ``sym_norm``."""
    flat = {name: (t.flatten(1), torch.linalg.matrix_norm(t)) for name, t in targets.items()}
    norm = sym_norm(wq, wk)  # (H,)
    out: dict[str, list[Tensor]] = {name: [] for name in targets}
    step = max(1, next(iter(targets.values())).shape[0])
    for start in range(0, wq.shape[0], step):
        a = (wq[start:start + step].mT @ wk[start:start + step]).flatten(1)  # (c, D^2)
        for name, (t, t_norm) in flat.items():
            out[name].append((t @ a.T) / (t_norm.unsqueeze(-1) * norm[start:start + step]))  # (L, c)
    return {name: torch.cat(c, 1) for name, c in out.items()}


def margin_verdict(low: float, high: float) -> str:
    """``supported`` when the margin's interval lies above 0, ``not_supported`` when below, else ``inconclusive``."""
    return "supported" if low > 0 else "not_supported" if high < 0 else "inconclusive"


def margins(cos: dict[str, np.ndarray], q95: np.ndarray, reading: Reading) -> np.ndarray:
    """$m_h$ of ``reading`` from per-head cosines ``cos[key]`` ``(L, H)`` (keys: the targets, ``identity`` and,
    where present, ``haar_<target>`` and the powers ``power<p>_<target>``) and the per-layer random percentile
    ``q95`` ``(L,)``."""
    chance = np.broadcast_to(q95[:, None], cos["identity"].shape)
    rivals = [cos[reading.rival], cos["identity"], chance, *(c for key, c in cos.items() if key.startswith("power"))]
    if f"haar_{reading.target}" in cos:
        rivals.append(cos[f"haar_{reading.target}"])
    return cos[reading.target] - np.maximum.reduce(rivals)


def mean_interval(values: np.ndarray, rng: np.random.Generator, unit: str = "layer") -> tuple[float, float, float]:
    """Mean of ``values`` ``(L, H)`` (all entries pooled) and its 95% percentile-bootstrap interval (``BOOTSTRAP``
    resamples). ``unit="layer"``: the heads of a layer share its input, so each resample draws ``L`` layers with
    replacement, then ``H`` heads with replacement within each drawn layer (two stages: a single layer still gets
    an interval from its heads); ``unit="head"``: heads drawn from all layers pooled."""
    if unit == "head":
        flat = values.ravel()
        boot = flat[rng.integers(0, flat.size, (BOOTSTRAP, flat.size))].mean(1)
    else:
        n_layers, n_heads = values.shape
        layers = rng.integers(0, n_layers, (BOOTSTRAP, n_layers, 1))
        boot = values[layers, rng.integers(0, n_heads, (BOOTSTRAP, n_layers, n_heads))].mean((1, 2))
    low, high = np.quantile(boot, [0.025, 0.975])
    return float(values.mean()), float(low), float(high)


def rule(headline: tuple[float, float], deflations: list[tuple[float, float]]) -> str:
    """The verdict of a reading from the intervals ``(low, high)`` of its mean margin and of its mean deflated
    margins at each $k$ in ``DECIDING``: supported when all lie above 0, not supported when any lies below 0."""
    parts = [headline, *deflations]
    if all(low > 0 for low, _ in parts):
        return "supported"
    return "not_supported" if any(high < 0 for _, high in parts) else "inconclusive"


def judge_margins(cos: dict[str, np.ndarray], deflations: dict[int, dict[str, np.ndarray]], q95: np.ndarray,
                  reading: Reading, rng: np.random.Generator) -> dict:
    """``rule`` on one set of heads: ``cos`` (key -> ``(L, H)``), the deflated cosines per ``k`` (``DEFLATIONS``;
    ``DECIDING`` decide) and the random forms' percentile ``q95`` ``(L,)`` (the same with every deflation). Returns the
    verdict, the margins ``(L, H)``, the mean margin with its interval, per ``k`` the deflated one, and the old rule
    (rivals without the spectrum, no deflation, heads pooled) for reference."""
    m = margins(cos, q95, reading)
    mean, low, high = mean_interval(m, rng)
    out = {"margin": m, "mean_margin": mean, "low": low, "high": high}
    for k, at in deflations.items():
        mk = margins(at, q95, reading)
        out[f"deflated_{k}"] = dict(zip(("mean_margin", "low", "high"), mean_interval(mk, rng), strict=True))
    out["verdict"] = rule((low, high), [(out[f"deflated_{k}"]["low"], out[f"deflated_{k}"]["high"])
                                        for k in DECIDING if k in deflations])
    old = {key: c for key, c in cos.items() if not key.startswith(("haar_", "power"))}
    o_mean, o_low, o_high = mean_interval(margins(old, q95, reading), rng, "head")
    out["old_rule"] = {"verdict": margin_verdict(o_low, o_high), "mean_margin": o_mean, "low": o_low, "high": o_high}
    return out


def judge_reading(reading: Reading, heads: dict[str, dict], q95: np.ndarray, rng: np.random.Generator) -> dict:
    """The rule of the module docstring applied to the model's heads and to each control: ``heads[name]`` holds
    ``"cos"`` and ``"deflated"`` as in ``judge_margins`` (name ``"model"``, then the controls). Returns the
    model's verdict, mean margin with its interval, deflated margins, heads above their baselines, the
    strength (cos^2 of the target: median and maximum) and, per control, its verdict and numbers."""
    model = judge_margins(heads["model"]["cos"], heads["model"]["deflated"], q95, reading, rng)
    cos2 = np.square(heads["model"]["cos"][reading.target])
    controls = {}
    for name, h in heads.items():
        if name != "model":
            c = judge_margins(h["cos"], h["deflated"], q95, reading, rng)
            controls[name] = {k: v for k, v in c.items() if k != "margin"}
    return {
        "target": reading.label,
        "source": reading.source,
        **model,
        "heads_aligned": int((model["margin"] > 0).sum()),
        "heads": int(model["margin"].size),
        "median_cos2": float(np.median(cos2)),
        "max_cos2": float(cos2.max()),
        "controls": controls,
    }


def with_rotations(pairs: dict[str, tuple[Tensor, Tensor]], q: Float[Tensor, "r r"]) -> dict[str, tuple]:
    """Each pair of rows ``(u, v)`` ``(..., rows, r)`` as ``(u, v, uQ, vQ)`` for the deflations (a form given as
    ``u = v`` rotated once)."""
    out = {}
    for name, (u, v) in pairs.items():
        uq = u @ q
        out[name] = (u, v, uq, uq if v is u else v @ q)
    return out
