r"""E4: is a head's bilinear form $W_q^\top W_k$ aligned with $\Sigma^{-1}$ or the inverse Fisher matrix?

$$A_h = \operatorname{sym}(W_{q,h}^\top W_{k,h}),\qquad
\cos(A, B) = \frac{\langle A, B\rangle_F}{\lVert A\rVert_F \lVert B\rVert_F},\qquad
\Sigma_\lambda = \Sigma + \lambda I,\ \lambda = 10^{-2}\operatorname{tr}(\Sigma)/D$$

(seed 000 §3.2, §6, claim A11: for Gaussian hidden states the matched key is $\Sigma^{-1}h_j$, so
$W_q^\top W_k \approx \Sigma^{-1}$). $\Sigma$ is the covariance of ``layers.i.attn.input``
(the tensor the projections read) without the first/special and massive-activation tokens. The Fisher matrix is the
Hessian of the head's log-normalizer over the keys' source states,
$F_h = E_i \operatorname{Cov}_{p_h(j\mid i)}[x_j]$, averaged over the queries of the detail
sequences with the model's real attention weights (RoPE, causal mask included), regularised the
same way. RoPE: $A_h$ uses the unrotated projections, i.e. the relative-offset-0 form; the
position-dependent rotation is ignored there. Baselines: $\operatorname{sym}(R_q^\top R_k)$ for
Gaussian $R$ of the head's shape (same construction and rank; 95th percentile of the cosine in
closed form, see ``random_q95``, checked per layer by Monte Carlo against $\Sigma^{-1}$),
$\Sigma$ itself and the identity. A head is aligned when $\cos(A_h, \Sigma_\lambda^{-1})$ beats all
three. Verdict: 95% bootstrap interval (over heads) of the mean margin above the best baseline
(supported above 0, not supported below 0). Negative control through the same margin and rule:
random heads $\operatorname{sym}(R_q^\top R_k)$ of the layer's head count in place of the model's.
Precision: the cosines are float32 (the weights are float32; a Frobenius inner product of $D^2$
terms then has relative error about $10^{-7}\sqrt{D^2}/|\cos|$, ~1e-5 for a cosine of 0.003 at
$D = 576$), the inverses go through a float32 Cholesky factor (~1e-4, see ``regularised_inverse``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from expattn.probes.attention import attention_probs
from expattn.probes.common import (
    Batch,
    Estimator,
    Judgement,
    Measured,
    ProbeContext,
    as_list,
    figure,
    kept_weights,
    save,
    shared,
)
from expattn.probes.e3_gaussianity import kept_moments
from expattn.probes.stats import Moments, gram
from expattn.results.record import Control

RIDGE = 1e-2
RANDOM_DRAWS = 16


def sym_cos(u: Tensor, v: Tensor, b: Tensor) -> Tensor:
    """$\\cos(\\operatorname{sym}(u^\\top v), B)$ for ``u, v`` of shape ``(..., r, D)`` and symmetric
    ``B`` ``(..., D, D)`` (or ``None`` for the identity), batched over the leading dims, without forming the
    ``(D, D)`` product:
    $\\langle u^\\top v, B\\rangle = \\sum (uB)\\odot v$ and
    $\\lVert\\operatorname{sym}(u^\\top v)\\rVert^2 =
    \\tfrac12(\\langle uu^\\top, vv^\\top\\rangle + \\langle vu^\\top, uv^\\top\\rangle)$."""
    inner = (u * v).sum((-1, -2)) if b is None else ((u @ b) * v).sum((-1, -2))
    b_norm = u.shape[-1] ** 0.5 if b is None else torch.linalg.matrix_norm(b)
    vu = v @ u.mT
    sym_sq = ((u @ u.mT) * (v @ v.mT)).sum((-1, -2)) + (vu * vu.mT).sum((-1, -2))
    return inner / ((sym_sq / 2).sqrt() * b_norm)


def margin_verdict(low: float, high: float) -> str:
    """``supported`` when the margin's interval lies above 0, ``not_supported`` when below, else ``inconclusive``."""
    return "supported" if low > 0 else "not_supported" if high < 0 else "inconclusive"


def random_q95(dim: int) -> float:
    """95th percentile of $\\cos(\\operatorname{sym}(R_q^\\top R_k), B)$ for Gaussian $R$: the inner product has
    variance $r\\lVert B\\rVert_F^2$ and $E\\lVert\\operatorname{sym}(R_q^\\top R_k)\\rVert_F^2 = r D(D+1)/2$, so the
    cosine is about $N(0, 2/(D(D+1)))$ whatever $B$ and the rank $r$ (checked by Monte Carlo against $\\Sigma^{-1}$)."""
    return 1.6449 * (2.0 / (dim * (dim + 1))) ** 0.5


def regularised_inverse(m: Tensor) -> tuple[Tensor, float, int]:
    """$(M_+ + \\lambda I)^{-1}$ with $\\lambda = 10^{-2}\\operatorname{tr}M/D$ (batched over leading dims), where
    $M_+$ is $M$ with negative eigenvalues clipped to 0; returns it, $\\lambda$ (mean over the batch)
    and how many matrices needed the clipping.

    Only the lower triangle of ``M`` is read (it is symmetric up to rounding). Through a float32
    Cholesky factor: the ridge bounds the condition number by $100 D + 1$, so
    float32 leaves cosines accurate to ~1e-4. A matrix that float32 rounding (or its estimate)
    leaves indefinite falls back to a float64 eigendecomposition with the clipping.
    """
    lam = RIDGE * torch.diagonal(m, dim1=-2, dim2=-1).mean(-1)
    reg = m.to(torch.float32, copy=True)
    reg.diagonal(dim1=-2, dim2=-1).add_(lam.to(torch.float32).unsqueeze(-1))
    chol, info = torch.linalg.cholesky_ex(reg)  # reads the lower triangle only: no symmetrising copy
    inv = torch.cholesky_inverse(chol).to(m.dtype)
    bad = info != 0
    if bad.any():
        floor = lam.expand(info.shape)[bad].double()[..., None]
        e, v = torch.linalg.eigh(m[bad].double() + floor[..., None] * torch.eye(m.shape[-1], dtype=torch.float64))
        inv[bad] = ((v / e.clamp_min(floor).unsqueeze(-2)) @ v.mT).to(m.dtype)
    return inv, float(lam.mean()), int(bad.sum())


class E4Alignment(Estimator):
    """Streaming E4 estimator.

    Fitted: ``inputs_`` (per layer Moments), ``detail_`` (per layer, index -> (T, D) input).
    """

    claim = "E4"
    method = (
        "Frobenius cosine of sym(Wq_h^T Wk_h) with (Sigma+lambda I)^-1 and the inverse attention "
        "Fisher; heads bootstrap"
    )
    criterion = (
        "supported iff the 95% bootstrap interval over heads of the mean margin of cos(A_h, "
        "Sigma_lambda^-1) over the best of cos(A_h, Sigma), cos(A_h, I) and the random 95th percentile lies above "
        "0; not_supported iff below 0; random heads judged by the same rule must not be supported"
    )

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        self.inputs_ = [Moments(ctx.dim, True, dtype=ctx.statistics) for _ in range(ctx.layers)]
        self.detail_: list[dict[int, Tensor]] = [{} for _ in range(ctx.layers)]

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        x = tensors["attn.input"]  # on post-LN models the block input: E3 has computed its moments already
        kept = self.ctx.kept
        keep = kept_weights(batch, tensors, kept).bool()
        self.inputs_[i].merge(shared(batch, "moments kept", x, lambda t: kept_moments(t, kept, keep)))
        for row, index in enumerate(batch.index.tolist()):
            if index < self.ctx.detail_sequences:
                self.detail_[i][index] = x[row].clone()

    def merge(self, other: E4Alignment) -> E4Alignment:
        for mine, theirs in zip(self.inputs_, other.inputs_, strict=True):
            mine.merge(theirs)
        for mine, theirs in zip(self.detail_, other.detail_, strict=True):
            mine.update(theirs)
        return self

    def fisher(self, i: int) -> Tensor:
        """Per head $E_i \\operatorname{Cov}_{p_h(j|i)}[x_j]$ over the detail sequences, ``(H, D, D)`` float32."""
        xs = torch.stack([self.detail_[i][k] for k in sorted(self.detail_[i])])  # (B, T, D)
        p = attention_probs(xs, self.ctx.attention[i])  # (B, H, T, T)
        xc = xs - xs.mean(1, keepdim=True)  # the covariance is shift invariant; centring keeps float32 accurate
        # sum_j w_j x_j x_j^T with w_j the total attention key j receives, as a Gram matrix of sqrt(w_j) x_j
        rooted = (p.sum(-2).sqrt().unsqueeze(-1) * xc.unsqueeze(1)).transpose(0, 1).flatten(1, 2)  # (H, B*T, D)
        means = (p @ xc.unsqueeze(1)).transpose(0, 1).flatten(1, 2)  # (H, B*T, D): E_p(j|i) x_j per query
        return (gram(rooted) - gram(means)) / (xs.shape[0] * xs.shape[1])  # one Gram matrix per head

    def _layer(self, i: int, gen: torch.Generator) -> dict:
        w = self.ctx.attention[i].to(torch.float32)
        sigma = self.inputs_[i].covariance_
        eig = torch.linalg.eigvalsh(sigma)
        sigma_inv, lam, _ = regularised_inverse(sigma)
        fisher_inv, lam_f, clipped = regularised_inverse(self.fisher(i))  # (H, D, D)
        out: dict = {
            "ridge_sigma": lam,
            "ridge_fisher": lam_f,
            "fisher_heads_clipped": clipped,
            "condition_sigma": float(eig[-1] / eig[0].clamp_min(1e-16 * eig[-1])),  # capped at 1e16: singular
        }
        rq = torch.randn(RANDOM_DRAWS, w.head_dim, self.ctx.dim, generator=gen)
        rk = torch.randn(RANDOM_DRAWS, w.head_dim, self.ctx.dim, generator=gen)
        sigma_inv, sigma32 = sigma_inv.float(), sigma.float()  # cosines in float32: see the module docstring
        draws = sym_cos(rq, rk, sigma_inv).double()
        out["random_rms_sigma"] = float(draws.pow(2).mean().sqrt())  # Monte Carlo check of the closed form
        out["random_rms_analytic"] = random_q95(self.ctx.dim) / 1.6449
        out["random_q95_analytic"] = random_q95(self.ctx.dim)
        heads = w.heads  # negative control: random heads of the same shape through the same margin
        control = [sym_cos(rq[:heads], rk[:heads], t).double().numpy() for t in (sigma_inv, sigma32, None)]
        out["control_margin"] = control[0] - np.maximum.reduce([control[1], control[2],
                                                                np.full_like(control[0], out["random_q95_analytic"])])
        wq, wk = w.head_matrices()  # (H, dh, D) each: all heads at once
        for key, target in (
            ("cos_sigma_inv", sigma_inv),
            ("cos_fisher_inv", fisher_inv),
            ("cos_sigma", sigma32),
            ("cos_identity", None),
        ):
            out[key] = sym_cos(wq, wk, target).double().numpy()
        return out

    def measure(self) -> Measured:
        gen = torch.Generator().manual_seed(self.ctx.seed + 4)
        layers = [self._layer(i, gen) for i in range(self.ctx.layers)]
        base = np.stack(
            [
                np.maximum.reduce(
                    [lay["cos_sigma"], lay["cos_identity"], np.full_like(lay["cos_sigma"], lay["random_q95_analytic"])]
                )
                for lay in layers
            ]
        )
        margin = np.stack([lay["cos_sigma_inv"] for lay in layers]) - base  # (L, H)
        margin_f = np.stack([lay["cos_fisher_inv"] for lay in layers]) - base
        rng = np.random.default_rng(self.ctx.seed + 40)
        picks = rng.integers(0, margin.size, (2000, margin.size))
        boot = margin.ravel()[picks].mean(1)
        boot_f = margin_f.ravel()[picks].mean(1)
        lo, hi = np.quantile(boot, [0.025, 0.975])
        lo_f, hi_f = np.quantile(boot_f, [0.025, 0.975])
        margin_c = np.stack([lay["control_margin"] for lay in layers])
        lo_c, hi_c = np.quantile(margin_c.ravel()[rng.integers(0, margin_c.size, (2000, margin_c.size))].mean(1),
                                 [0.025, 0.975])
        metrics = {
            "heads_aligned_sigma_inv": int((margin > 0).sum()),
            "heads_aligned_fisher_inv": int((margin_f > 0).sum()),
            "heads": int(margin.size),
            "mean_margin_sigma_inv": float(margin.mean()),
            "mean_margin_sigma_inv_low": float(lo),
            "mean_margin_sigma_inv_high": float(hi),
            "mean_margin_fisher_inv": float(margin_f.mean()),
            "mean_margin_fisher_inv_low": float(lo_f),
            "mean_margin_fisher_inv_high": float(hi_f),
            "median_cos_sigma_inv": float(np.median([lay["cos_sigma_inv"] for lay in layers])),
            "median_cos_identity": float(np.median([lay["cos_identity"] for lay in layers])),
            "ridge_relative": RIDGE,
            "fisher_heads_clipped": sum(lay["fisher_heads_clipped"] for lay in layers),
            "fisher_sequences": len(self.detail_[0]),
        }
        details = {
            k: [as_list(lay[k]) if isinstance(lay[k], np.ndarray) else lay[k] for lay in layers] for k in layers[0]
        }
        details["rope"] = (
            "A_h ignores the rotary rotation (offset-0 form); the Fisher uses the model's rotated attention"
            if self.ctx.attention[0].rope
            else "no rotary embedding"
        )
        arrays = {"layers": layers, "interval": np.array([lo, hi]), "control_margin": margin_c,
                  "control_interval": np.array([lo_c, hi_c])}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a = measured.arrays
        lo_c, hi_c = a["control_interval"]
        control = Control("random heads sym(R_q^T R_k) of the same shape", "negative", margin_verdict(lo_c, hi_c),
                          {"mean_margin": float(a["control_margin"].mean()), "low": float(lo_c), "high": float(hi_c)})
        notes = (
            f"lambda = {RIDGE} * tr(M)/D; verdict on Sigma^-1 margin over max(random q95, cos with Sigma, "
            f"cos with I); {measured.details['rope']}"
        )
        return Judgement(margin_verdict(*a["interval"]), [control], notes)

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir)
        if fig is None:
            return []
        layers = measured.arrays["layers"]
        for ax, key, rand_key, title in (
            (axes[0], "cos_sigma_inv", "random_q95_analytic", "vs Sigma^-1"),
            (axes[1], "cos_fisher_inv", "random_q95_analytic", "vs Fisher^-1"),
        ):
            for i, lay in enumerate(layers):
                jit = i + np.linspace(-0.25, 0.25, len(lay[key]))
                ax.scatter(jit, lay[key], s=10, c="C0", label="cos(A_h, target)" if i == 0 else None)
                ax.scatter(jit, lay["cos_identity"], s=6, c="C1", marker="x", label="cos(A_h, I)" if i == 0 else None)
                ax.scatter(jit, lay["cos_sigma"], s=6, c="C2", marker="+", label="cos(A_h, Sigma)" if i == 0 else None)
                ax.hlines(np.max(lay[rand_key]), i - 0.3, i + 0.3, color="k",
                          label="random sym(RqRk) q95" if i == 0 else None)
            ax.axhline(0, color="grey", lw=0.5)
            ax.set(xlabel="layer (dots = heads)", ylabel="Frobenius cosine", title=f"E4 {self.ctx.title_name}: {title}")
            ax.legend(fontsize=6)
        return save(fig, out_dir, f"{self.ctx.slug}_e4_alignment.png")
