r"""E8: are the heads' updates coherent (aligned) or incoherent?

$$u_{h,t} = W_o[:, h]\, z_{h,t},\qquad
C_\ell = \frac{1}{H(H-1)} \sum_{h \ne h'} \cos(u_{h,t}, u_{h',t}),\qquad
\gamma_\ell = \frac{\lVert\sum_h u_{h,t}\rVert^2}{\sum_h \lVert u_{h,t}\rVert^2}$$

(claim B8, seed 000 §5: heads take gradient steps in different linear distortions of space).
$z$ = ``layers.i.attn.heads``, split per head and mapped through that head's columns of the output
projection ($\sum_h u_h + b_o$ = ``layers.i.attn.output`` unless a norm follows it, as in Gemma 3).
$\gamma = 1$ for orthogonal updates and $H$ for identical ones. Null baseline: the same cosine between head
$h$ at token $t$ and head $h'$ at another token $s \ne t$ of the sequence, averaged over every such pair
(shared directions that are not specific to the token). Per head, with the same null, ``details["head_coherence"]``
(layers x heads; per sequence, then averaged over sequences; the mean over heads is the layer's margin):

$$c_{\ell,h} = \frac{1}{T(H-1)} \sum_t \sum_{h' \ne h} \cos(u_{h,t}, u_{h',t})
- \frac{1}{T(T-1)(H-1)} \sum_{s \ne t} \sum_{h' \ne h} \cos(u_{h,t}, u_{h',s}),
\qquad \frac1H \sum_h c_{\ell,h} = C_\ell - C_{\ell,null}.$$

Two questions, two numbers per layer (without first/special tokens). (a) Do the heads step in a shared
direction at all? $C_\ell$ against random directions: independent isotropic updates in width $D$ have mean
cosine 0 and $E|\cos| = \sqrt{2/(\pi D)}$ per pair (0.03-0.04 at D = 384-640), so the raw coherence is small
when its 95% interval lies within $\pm m_D$, $m_D = \max(0.1, \sqrt{2/(\pi D)})$ (0.1 is above one random
pair's typical cosine for every $D \ge 64$). (b) Is the alignment specific to the token? $C - C_{null}$
against the cross-token null, small when its interval lies within $\pm 0.1$. A head sharing one direction at
every token (one key-value head, a common bias of the updates) raises the null with $C$ and leaves (b) small:
only (a) sees it. A layer is incoherent when both are small and coherent when either interval lies outside its
band: "shared direction" when only (a) does, "token-specific" when (b) does. Verdict: supported (incoherent)
when most layers are incoherent, not supported when most are coherent (the record names the kind of most),
and inconclusive when neither, or when the count's 95% bootstrap interval reaches half the layers
(``base.majority_verdict``). Negative control,
through the same code and rule on the detail sequences: coherent heads, every head replaced by a copy of
head 0 (its $z$ and its columns of $W_o$), so the heads' updates of a token coincide; it must not come out
incoherent.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.hypotheses.base import (
    Batch,
    Estimator,
    Judgement,
    Measured,
    ProbeContext,
    as_list,
    band,
    count_interval,
    figure,
    majority_verdict,
    replicate_intervals,
    save,
)
from expattn.probes.models.attention import AttnWeights
from expattn.probes.sizes import Sizes, bootstrap_bytes
from expattn.probes.statistics import stats
from expattn.probes.statistics.stats import BootstrapMeans
from expattn.results.record import Control

MARGIN = 0.1
KINDS = ("incoherent", "shared direction", "token-specific")
_F = 3  # mean pairwise cosine, null cosine, energy ratio gamma


class HeadGram(NamedTuple):
    r"""The parts of $G = W_o^\top W_o$ that ``head_cosines`` reads ($u_h \cdot u_{h'} = z_h^\top G_{hh'} z_{h'}$):
    ``blocks`` ``(heads, head_dim, head_dim)`` the diagonal blocks $G_{hh}$, and ``off`` ``(heads*head_dim,
    heads*head_dim)`` the matrix $G^\circ$, $G$ with those blocks set to 0."""

    blocks: Float[Tensor, "heads head_dim head_dim"]
    off: Float[Tensor, "heads*head_dim heads*head_dim"]


def head_gram(w: AttnWeights) -> HeadGram:
    """``HeadGram`` of a layer's output projection: constant per layer, so built once per run."""
    gram, heads, dh = w.wo.T @ w.wo, w.heads, w.head_dim
    blocks = gram.view(heads, dh, heads, dh).diagonal(dim1=0, dim2=2).permute(2, 0, 1).contiguous()  # (H, dh, dh)
    off = gram.clone()
    off.view(heads, dh, heads, dh).diagonal(dim1=0, dim2=2).zero_()
    return HeadGram(blocks, off)


def copied_head(w: AttnWeights) -> HeadGram:
    """``HeadGram`` of the coherent control: every head's columns of ``W_o`` replaced by head 0's."""
    wo = w.wo[:, : w.head_dim].repeat(1, w.heads)
    return head_gram(SimpleNamespace(wo=wo, heads=w.heads, head_dim=w.head_dim))


class HeadCosines(NamedTuple):
    """Per sequence, float64 (``head_cosines``): ``same``, ``null`` and ``energy`` ``(batch,)`` and the per-head
    margin ``head`` ``(batch, heads)``."""

    same: Float[Tensor, " batch"]
    null: Float[Tensor, " batch"]
    energy: Float[Tensor, " batch"]
    head: Float[Tensor, "batch heads"]


def head_cosines(
    z: Float[Tensor, "batch token heads*head_dim"], gram: HeadGram, heads: int, update: Float[Tensor, "batch token dim"]
) -> HeadCosines:
    r"""Per sequence ``(batch,)`` float64: the mean over tokens of the mean pairwise cosine of the heads'
    updates; the mean cosine between head $h$ at token $t$ and head $h'$ at any other token $s \ne t$; the
    mean over tokens of $\lVert\sum_h u_h\rVert^2 / \sum_h\lVert u_h\rVert^2$; and ``(batch, heads)`` each head's
    margin $c_h$ (module docstring), the first two restricted to pairs that contain head $h$.

    ``z`` ``(batch, token, heads*head_dim)`` is the heads' outputs side by side, before the output projection.
    Works in the heads' value space through ``gram`` (``head_gram``; no ``(token, head, dim)`` tensor). With
    $\hat z_h = z_h / \lVert u_h\rVert$ and $G^\circ$ = $G$ with its diagonal blocks $G_{hh}$ set to 0,
    $\sum_{h'\ne h}\cos(u_{h,t}, u_{h',t}) = \hat z_{h,t}^\top (G^\circ \hat z_t)_h$, so a sequence's sum over
    tokens is $\langle G^\circ_h, S_h\rangle_F$, the rows of head $h$ of $G^\circ$ and of the per-sequence
    scatter $S = \sum_t \hat z_t \hat z_t^\top$ (a ``syrk``: half the multiply-adds of the token-by-token
    products); the sum over $h$ is $\langle G^\circ, S\rangle_F$. Over all pairs of tokens, with
    $Z = \sum_t \hat z_t$: $\sum_{s \ne t}\sum_{h'\ne h} \hat z_{h,t}^\top G_{hh'} \hat z_{h',s}
    = Z_h^\top (G^\circ Z)_h - \langle G^\circ_h, S_h\rangle_F$.
    ``update`` ``(batch, token, D)`` is $\sum_h u_h = W_o z$ (the output projection without its bias; not the
    model's attention output, which may pass through a norm first), so the energy needs no second product with $G$.
    """
    b, t, hd = z.shape
    dh = hd // heads
    blocks, off = gram
    zt = z.reshape(b * t, heads, dh)  # (N, H, dh): the one copy of a strided view
    sq = torch.linalg.vecdot(torch.bmm(zt.transpose(0, 1), blocks), zt.transpose(0, 1)).clamp_min(1e-30)  # |u_h|^2
    zn = (zt * sq.T.rsqrt().unsqueeze(-1)).view(b, t, hd)  # unit-update scaling, (N, H, dh) kept: no transposed copy
    rows, off_rows = stats.gram(zn).view(b, heads, dh * hd), off.view(heads, dh * hd)  # head h's rows of S, G°
    same = torch.stack([rows[:, h] @ off_rows[h] for h in range(heads)], 1).double()  # (B, H): <G°_h, S_h>, no copy
    total = zn.sum(1).double()  # (B, H*dh); the small products below in float64: they cancel
    across = ((total @ off.double()) * total).view(b, heads, dh).sum(-1) - same  # (B, H)
    energy = (update * update).sum(-1) / sq.sum(0).view(b, t)  # (B, T)
    same, across = same / (t * (heads - 1)), across / (t * (t - 1) * (heads - 1))  # per head: mean over h' != h
    return HeadCosines(same.mean(1), across.mean(1), energy.double().mean(1), same - across)


def random_cosine(dim: int) -> float:
    r"""$E|\cos(u, v)| \approx \sqrt{2/(\pi D)}$ for independent isotropic $u, v$ in width $D$ (the cosine is
    about $\mathcal N(0, 1/D)$)."""
    return math.sqrt(2 / (math.pi * dim))


def layer_kinds(lo: np.ndarray, hi: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per layer (``lo``, ``hi`` ``(..., layers, 4)``, the intervals of ``_stats``'s columns; any leading axes): the
    raw coherence and the token-specific margin both inside their bands (incoherent), the raw coherence outside
    its band and the margin not (shared direction), and the margin outside its band (token-specific); each
    ``(..., layers)`` boolean."""
    raw_band = max(MARGIN, random_cosine(dim))
    raw_in = (lo[..., 0] > -raw_band) & (hi[..., 0] < raw_band)
    raw_out = (lo[..., 0] > raw_band) | (hi[..., 0] < -raw_band)
    token_in = (lo[..., 3] > -MARGIN) & (hi[..., 3] < MARGIN)
    token_out = (lo[..., 3] > MARGIN) | (hi[..., 3] < -MARGIN)
    return raw_in & token_in, raw_out & ~token_out, token_out


def heads_verdict(lo: np.ndarray, hi: np.ndarray, lo_rep: np.ndarray, hi_rep: np.ndarray, dim: int
                  ) -> tuple[str, str, dict]:
    """E8's rule (module docstring) on the intervals ``(layers, 4)`` and each replicate's ``(R, layers, 4)``:
    the verdict, the kind most layers have (``KINDS``, or "mixed") and the counts with their intervals."""
    incoherent, shared, token = layer_kinds(lo, hi, dim)
    reps = layer_kinds(lo_rep, hi_rep, dim)
    verdict = majority_verdict(incoherent, shared | token, reps[0], reps[1] | reps[2])
    counts = [int(k.sum()) for k in (incoherent, shared, token)]
    kind = KINDS[int(np.argmax(counts))] if max(counts) > len(lo) / 2 else "mixed"
    metrics = {"layers_incoherent": counts[0], "layers_incoherent_interval": count_interval(reps[0]),
               "layers_coherent": counts[1] + counts[2], "layers_coherent_interval": count_interval(reps[1] | reps[2]),
               "layers_shared_direction": counts[1], "layers_token_specific": counts[2]}
    return verdict, kind, metrics


class E8Heads(Estimator):
    """Streaming E8 estimator. Fitted: ``stats_`` (BootstrapMeans), ``head_sum_`` (per layer, ``(heads,)`` sums
    over sequences of each head's margin $c_h$)."""

    claim = "E8"
    tensors = ("attn.heads",)
    needs = ("attention.softmax",)
    method = "pairwise cosines of per-head updates W_o[:, h] z_h at the same token vs other tokens; Poisson bootstrap"
    criterion = (
        f"per layer, incoherent iff the 95% bootstrap interval of the mean pairwise cosine lies within "
        f"+-max({MARGIN}, sqrt(2/(pi D))) (random directions) and that of (cosine - other-token null) within "
        f"+-{MARGIN}; coherent iff either lies outside (shared direction: the first only; token-specific: the "
        "second); supported iff most layers are incoherent, not_supported iff most are coherent, else inconclusive, "
        "as is a majority whose count's 95% bootstrap interval reaches half the layers; the coherent control must "
        "not come out supported"
    )

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Two bootstrap sums of ``_F`` numbers per layer, ``W_o^T W_o`` and its diagonal blocks in float32 (not an
        accumulator: the statistics' dtype leaves it as it is) and per-head sums."""
        width = n.heads * n.head_dim
        return (2 * bootstrap_bytes(n.layers * _F, n.replicates) + 4 * n.layers * width * (width + n.head_dim)
                + 8 * n.layers * n.heads)

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        self.stats_ = BootstrapMeans(ctx.layers * _F, ctx.replicates)
        self.grams = [head_gram(w) for w in ctx.attention]
        self._rows: dict[int, list[Tensor]] = {}
        self.head_sum_ = [torch.zeros(w.heads, dtype=torch.float64) for w in ctx.attention]
        self.control_ = BootstrapMeans(ctx.layers * _F, ctx.replicates)  # coherent heads, detail sequences
        self._control_rows: dict[int, list[Tensor]] = {}

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        w, kept = self.ctx.attention[i], self.ctx.kept
        z = tensors["attn.heads"][:, kept]
        update = z @ w.wo.T.to(z.dtype)  # not attn.output, which a norm may follow (Gemma 3's post-attention norm)
        cos = head_cosines(z, self.grams[i], w.heads, update)
        self._rows[i] = [cos.same, cos.null, cos.energy]
        self.head_sum_[i] = self.head_sum_[i].to(cos.head.device) + cos.head.sum(0)
        rows = batch.index < self.ctx.detail_sequences
        if rows.any():
            z0 = z[rows][..., : w.head_dim]
            copied = z0 @ w.wo[:, : w.head_dim].T.to(z0.dtype) * w.heads
            self._control_rows[i] = list(head_cosines(z0.repeat(1, 1, w.heads), copied_head(w), w.heads, copied)[:3])
        if i == self.ctx.layers - 1:
            values = torch.stack([c for j in range(self.ctx.layers) for c in self._rows.pop(j)], dim=1)
            self.stats_.update(values, batch.weights)
            if rows.any():
                values = torch.stack([c for j in range(self.ctx.layers) for c in self._control_rows.pop(j)], dim=1)
                self.control_.update(values, batch.weights[rows])

    def merge(self, other: E8Heads) -> E8Heads:
        self.stats_.merge(other.stats_)
        self.control_.merge(other.control_)
        self.head_sum_ = [a + b.to(a.device) for a, b in zip(self.head_sum_, other.head_sum_, strict=True)]
        return self

    def _stats(self, m: Tensor) -> Tensor:
        m = m.view(*m.shape[:-1], self.ctx.layers, _F)
        return torch.cat([m, (m[..., 0] - m[..., 1]).unsqueeze(-1)], dim=-1)  # (..., L, 4)

    def measure(self) -> Measured:
        est, lo, hi = (t.cpu().numpy() for t in self.stats_.interval(self._stats))
        lo_rep, hi_rep = replicate_intervals(est, lo, hi, self.stats_.replicates(self._stats).cpu().numpy())
        c_est, c_lo, c_hi = (t.cpu().numpy() for t in self.control_.interval(self._stats))
        c_lo_rep, c_hi_rep = replicate_intervals(c_est, c_lo, c_hi,
                                                 self.control_.replicates(self._stats).cpu().numpy())
        details: dict = {
            "tensors": "layers.i.attn.heads through per-head columns of the output projection",
            "tokens": "first/special tokens excluded",
        }
        for k, name in enumerate(("mean_pairwise_cos", "null_cos", "energy_ratio", "cos_minus_null")):
            details[name] = {"estimate": as_list(est[:, k]), "low": as_list(lo[:, k]), "high": as_list(hi[:, k])}
        details["head_coherence"] = [as_list(h.cpu() / self.stats_.n_) for h in self.head_sum_]  # (layers, heads)
        metrics = {
            "layers": self.ctx.layers,
            "median_pairwise_cos": float(np.median(est[:, 0])),
            "random_direction_cos": random_cosine(self.ctx.dim),
            "median_null_cos": float(np.median(est[:, 1])),
            "median_cos_minus_null": float(np.median(est[:, 3])),
            "median_energy_ratio": float(np.median(est[:, 2])),
            "heads": self.ctx.attention[0].heads,
            "sequences": self.stats_.n_,
        }
        arrays = {"est": est, "lo": lo, "hi": hi, "lo_rep": lo_rep, "hi_rep": hi_rep, "control_est": c_est,
                  "control_lo": c_lo, "control_hi": c_hi, "control_lo_rep": c_lo_rep, "control_hi_rep": c_hi_rep}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a, dim = measured.arrays, self.ctx.dim
        verdict, kind, metrics = heads_verdict(a["lo"], a["hi"], a["lo_rep"], a["hi_rep"], dim)
        control = Control(
            "coherent heads: every head a copy of head 0", "negative",
            heads_verdict(a["control_lo"], a["control_hi"], a["control_lo_rep"], a["control_hi_rep"], dim)[0],
            {"median_pairwise_cos": float(np.median(a["control_est"][:, 0])),
             "median_cos_minus_null": float(np.median(a["control_est"][:, 3])),
             "median_energy_ratio": float(np.median(a["control_est"][:, 2])), "sequences": self.control_.n_},
        )
        raw, random = float(np.median(a["est"][:, 0])), random_cosine(dim)
        notes = (
            f"supported = incoherent: in most layers the raw pairwise cosine within +-{max(MARGIN, random):.3g} "
            f"and (cos - null) within +-{MARGIN} (first/special tokens excluded); most layers: {kind} (median "
            f"pairwise cosine {raw:.3g}, {abs(raw) / random:.1f}x in size random directions' E|cos| = {random:.3g} "
            f"in width {dim}; median cos - null {float(np.median(a['est'][:, 3])):.3g})"
        )
        return Judgement(verdict, [control], notes, metrics, {"coherence": kind})

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir)
        if fig is None:
            return []
        est, lo, hi = (measured.arrays[k] for k in ("est", "lo", "hi"))
        x = np.arange(self.ctx.layers)
        band(axes[0], x, est[:, 0], lo[:, 0], hi[:, 0], "same token")
        band(axes[0], x, est[:, 1], lo[:, 1], hi[:, 1], "null: other token", ls="--")
        band(axes[1], x, est[:, 2], lo[:, 2], hi[:, 2], "energy ratio")
        axes[0].axhline(0, color="k", lw=0.8)
        axes[1].axhline(1, color="k", lw=0.8, label="orthogonal updates")
        axes[0].set(xlabel="layer", ylabel="mean cos between heads' updates",
                    title=f"E8 {self.ctx.model_name}: head coherence")
        axes[1].set(xlabel="layer", ylabel="|sum u_h|^2 / sum |u_h|^2",
                    title=f"E8 {self.ctx.model_name}: energy ratio (H = aligned)")
        for ax in axes:
            ax.legend(fontsize=7)
        return save(fig, out_dir, f"{self.ctx.slug}_e8_heads.png")
