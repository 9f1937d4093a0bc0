r"""E4 and E9: is a head's bilinear form $W_q^\top W_k$ aligned with $\Sigma^{-1}$ (E4) or with $\Sigma$ (E9)?

$$A_h = \operatorname{sym}(W_{q,h}^\top W_{k,h}),\qquad
\cos(A, B) = \frac{\langle A, B\rangle_F}{\lVert A\rVert_F \lVert B\rVert_F}$$

Seed 000 §3.2 (claim A11): for Gaussian hidden states the matched key is $\Sigma^{-1}h_j$, so
$W_q^\top W_k \approx \Sigma^{-1}$ (E4). Seed 000 §6: $W_q^\top W_k \approx$ the Fisher matrix, which is
$\Sigma$ for a Gaussian carrier (E9). Both are compared on the range of $\Sigma$, against their rival, the identity,
the target's spectrum on random eigenvectors and random forms, also with the target's top eigen-directions projected
out, with the head's own attention Fisher as a second target of each reading (see ``hypotheses.e4_readings`` for
the targets, the margins and the rule). Reported beside the verdict: the strength, $\cos^2$ (the fraction of a
head's squared norm the target explains), and whether a head fits its own layer's target better than every other
layer's (full space, $\Sigma_{l'}$ and $\Sigma_{l'}^{+}$ of each layer $l'$). $\Sigma$ is the covariance of
``layers.i.attn.input`` (the tensor the projections read) without the first/special and massive-activation tokens.
The attention Fisher is the Hessian of the head's log-normalizer over the keys' source states,
$F_h = E_i \operatorname{Cov}_{p_h(j\mid i)}[x_j]$, averaged over the queries of the detail sequences with the model's
real attention weights (RoPE, causal mask included). RoPE: $A_h$ uses the unrotated projections, i.e. the
relative-offset-0 form. Fewer than ``MIN_TOKENS_PER_DIM`` $\cdot D$ kept tokens leave $\Sigma$ too noisy on its range
(sample eigenvalues spread by $(1 \pm \sqrt{D/n})^2$: at $n = 4D$ the smallest are halved) and make every reading
inconclusive. ``cos_sigma_inv_ridge`` keeps the full-space comparison with $(\Sigma + 10^{-2}\operatorname{tr}\Sigma/D\,
I)^{-1}$ for reference. Precision: the cosines are float32 (the weights are float32; a Frobenius inner product of
$D^2$ terms then has relative error about $10^{-7}\sqrt{D^2}/|\cos|$, ~1e-5 for a cosine of 0.003 at $D = 576$);
the range comes from a float64 eigendecomposition.
"""

from __future__ import annotations

from pathlib import Path

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
    figure,
    kept_weights,
    save,
    shared,
)
from expattn.probes.hypotheses.e3_gaussianity import kept_moments
from expattn.probes.hypotheses.e4_criterion import MIN_TOKENS_PER_DIM, criterion, family, method
from expattn.probes.hypotheses.e4_dense import dense_deflated
from expattn.probes.hypotheses.e4_fisher import attention_fisher, fisher_targets, regularised_inverse
from expattn.probes.hypotheses.e4_readings import (
    DEFLATIONS,
    RANKS,
    READINGS,
    TOLERANCES,
    WEAK,
    deflated,
    full_cos,
    haar,
    judge_reading,
    random_q95,
    range_basis,
    sym_cos,
    top_form,
    with_rotations,
)
from expattn.probes.hypotheses.e4_support import (
    CONTROLS,
    POSITIVE,
    applicable,
    bilinear_form,
    mean_fractions,
    noisy_forms,
    own_over_best_other,
    range_tolerances,
    specificity,
    support_k,
    trace_fraction,
)
from expattn.probes.sizes import Sizes
from expattn.probes.statistics.stats import Moments
from expattn.results.record import Control

TARGETS = ("sigma_inv", "sigma", "fisher_inv", "fisher", "identity")


class E4Alignment(Estimator):
    """Streaming estimator of E4 (headline reading ``sigma_inv``, second reading ``fisher_inv``).

    Fitted: ``inputs_`` (per layer Moments), ``detail_`` (per layer, index -> (T, D) input).
    """

    claim = "E4"
    tensors = ("input", "attn.input")
    needs = ("attention.softmax", "attention.recomputable", "logits.uncapped", "logits.bilinear")
    readings = ("sigma_inv", "fisher_inv")
    method = method("Sigma^+", "the inverse attention Fisher")
    criterion = criterion("Sigma^+", "Sigma", "inverse attention Fisher")

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Per layer: the scatter and mean of the attention input, and the detail sequences' inputs (float32)
        for the Fisher matrices (E9 holds its own copy; none in a twin's run, ``n.deciding``)."""
        return n.layers * (n.big + 8 * n.hidden + (0 if n.deciding else 4 * n.detail * n.seq_len * n.hidden))

    @staticmethod
    def analysis_bytes(n: Sizes) -> int:
        r"""Beside the statistics while ``measure`` runs: every layer's float32 $\Sigma$ and $\Sigma^+$ targets and
        their ``(L, D, D)`` stacks (one name stacked at a time), and one layer's float64 eigendecomposition of
        $\Sigma$, its inverses and the ``(H, r, r)`` Fisher matrices of rank $r \le \min(D, \text{tokens})$ with
        their eigenvectors, inverses and the detail sequences' attention: $P$ and $K$ in float64 ``(H, S, T, T)``, then
        $K$ in float32 beside $KY$ ``(H, S, T, r)`` (not in a twin's run, ``n.deciding``)."""
        d, r, seqs, t = n.hidden, min(n.hidden, n.tokens), n.detail * n.seq_len, n.seq_len
        fisher = 0 if n.deciding else 20 * n.heads * r * r + 4 * n.heads * seqs * max(4 * t, 3 * t + r)
        return 12 * n.layers * d * d + 64 * d * d + fisher

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
            if index < self.ctx.detail_sequences and not self.ctx.deciding:  # for the Fisher readings
                self.detail_[i][index] = x[row].clone()

    def merge(self, other: E4Alignment) -> E4Alignment:
        for mine, theirs in zip(self.inputs_, other.inputs_, strict=True):
            mine.merge(theirs)
        for mine, theirs in zip(self.detail_, other.detail_, strict=True):
            mine.update(theirs)
        return self

    def fisher(self, i: int, basis: Float[Tensor, "dim r"]) -> Float[Tensor, "heads r r"]:
        """Per head $U^\\top F_h U$ over layer ``i``'s detail sequences (``e4_fisher.attention_fisher``)."""
        xs = torch.stack([self.detail_[i][k] for k in sorted(self.detail_[i])])  # (B, T, D)
        return attention_fisher(xs, self.ctx.attention[i], basis)

    def _layer(self, i: int, gen: torch.Generator) -> dict:
        r"""Per head cosines of layer ``i`` with every target, for the model's heads (``cos_<target>``: ``(H,)``);
        per reading ``spectral`` (name -> k -> heads -> key -> ``(H,)``) the cosines of ``e4_readings.deflated`` at
        k = 0 and ``DEFLATIONS`` of the model's heads, the random ones and the rank-one top forms (``(1,)`` for a
        $\Sigma$ reading, ``(H,)`` for a Fisher reading: one per head); ``own_fisher`` (reading -> ``(H, H)``, row
        = target head, column = head) the full-range cosines of each head with every head's Fisher target; and the
        full-space targets (``sigma_full``, taken out by ``_layers``)."""
        w = self.ctx.attention[i].to(torch.float32)
        sigma = self.inputs_[i].covariance_
        e, v = torch.linalg.eigh(sigma.double())
        lam, basis, gap = range_basis(e, v)
        u = basis.float()  # (D, r)
        dense, tops, ridge, clipped = {}, {}, None, 0  # a twin's run (ctx.deciding): no Fisher reading
        if not self.ctx.deciding:
            fisher = self.fisher(i, u)  # (H, r, r)
            start = torch.Generator().manual_seed(self.ctx.seed * 1009 + i)  # the eigensolver's start, off `gen`
            # (F_h+ + lambda_F I)^-1 with lambda_F = 1e-2 tr F_h / r beside F_h, and each target's top pairs
            dense, tops, ridge, clipped = fisher_targets(fisher, min(max(DEFLATIONS), lam.numel()), start)
        spectra = {"sigma": lam.float(), "sigma_inv": lam.reciprocal().float()}
        wq, wk = w.head_matrices()  # (H, dh, D) each: all heads at once
        aq, ak = wq @ u, wk @ u  # (H, dh, r): A_h in range coordinates is sym(aq^T ak)
        # random heads, range coordinates: drawn on the CPU (the same on every device), used on the data's device
        rq = torch.randn(w.heads, w.head_dim, lam.numel(), generator=gen).to(u.device)
        rk = torch.randn(w.heads, w.head_dim, lam.numel(), generator=gen).to(u.device)
        out: dict = {
            "sigma_rank": lam.numel(),
            "range_gap": gap,
            "condition_sigma": float(lam[-1] / lam[0]),
            "sigma_tokens": self.inputs_[i].n_,
            "ridge_fisher": ridge,
            "fisher_heads_clipped": clipped,
            "fisher_unconverged": int(sum(int((~t.converged).sum()) for t in tops.values())),
            "random_q95": random_q95(lam.numel()),
            "cos_identity": sym_cos(aq, ak, None).double().cpu().numpy(),
        }
        q = haar(lam.numel(), gen, u.device).to(torch.float32)
        sets = {"model": (aq, ak), "random": (rq, rk)}
        rotated = with_rotations(sets, q)
        noise = torch.Generator().manual_seed(self.ctx.seed * 1013 + i)  # the positive controls' draws
        names = [name for name in READINGS if family(name) == "sigma" or not self.ctx.deciding]
        out["spectral"] = {name: self._spectral(READINGS[name], spectra, rotated, q, (tops, dense), noise)
                           for name in names}
        for name in names:
            out[f"cos_{name}"] = out["spectral"][name][0]["model"][name]
        out["trace_fraction"] = trace_fraction(lam, applicable(DEFLATIONS, self.ctx.dim))
        if dense:
            out["own_fisher"] = {name: c.double().cpu().numpy() for name, c in full_cos(aq, ak, dense).items()}
        out["sigma_full"] = {"sigma": sigma.float(), "sigma_inv": ((basis / lam) @ basis.T).float()}
        out["cos_sigma_inv_ridge"] = sym_cos(wq, wk, regularised_inverse(sigma)[0].float()).double().cpu().numpy()
        for tol in TOLERANCES:  # the Sigma readings again at other cuts of the range
            lam_t, basis_t, _ = range_basis(e, v, tol)
            aq_t, ak_t = wq @ basis_t.float(), wk @ basis_t.float()
            out[f"tolerance_{tol:g}"] = {
                "rank": lam_t.numel(),
                "q95": random_q95(lam_t.numel()),
                "cos": {key: sym_cos(aq_t, ak_t, target).double().cpu().numpy()
                        for key, target in (("sigma_inv", lam_t.reciprocal().float()), ("sigma", lam_t.float()),
                                            ("identity", None))},
            }
        return out

    def _spectral(self, reading, spectra: dict[str, Tensor], rotated: dict, q: Tensor, fisher: tuple,
                  noise: torch.Generator) -> dict:
        r"""``reading``'s cosines (k -> heads -> key -> ``(H,)`` or ``(1,)``) at k = 0 and the ``applicable``
        deflations for the model's heads, the random ones, the target's truncations (negative controls) and, for a
        $\Sigma$ reading, the target itself and the target plus noise (positive controls, ``e4_support``)."""
        ks = (0, *applicable(DEFLATIONS, self.ctx.dim))
        ranks = applicable(RANKS, self.ctx.dim)
        if family(reading.name) == "sigma":  # the target truncated to its top directions: rows (rank, r)
            forms = {f"top{rank if rank > 1 else ''}": top_form(spectra[reading.target], rank) for rank in ranks}
            pairs = {h: (t, t) for h, t in forms.items()}
            pairs |= noisy_forms(spectra[reading.target], self.ctx.attention[0].head_dim, noise)
            heads = rotated | with_rotations(pairs, q)
            cosines = deflated(heads, spectra, reading, ks, q)
        else:  # each head's own target: dense (H, r, r), its top eigenpairs from the iterative solver
            tops, dense = fisher
            top = tops[reading.target]
            x = top.vectors.float()  # (H, r, K)
            rows = (x * top.values.clamp_min(0).sqrt().float().unsqueeze(-2)).mT  # (H, K, r): sqrt(theta_i) x_i
            forms = {f"top{rank if rank > 1 else ''}": rows[..., :rank, :] for rank in ranks}
            cosines = dense_deflated(rotated | with_rotations({h: (t, t) for h, t in forms.items()}, q), dense,
                                     reading.target, x, ks)
        return {k: {h: {t: c.double().cpu().numpy() for t, c in cos.items()} for h, cos in cosines[k].items()}
                for k in ks}

    def _layers(self) -> list[dict]:
        """``_layer`` of every layer, shared with an E4/E9 sibling fed the same statistics (``ctx.analyses``): the
        fingerprint is each layer's token count and scatter trace and the detail sequences' indices. ``across``:
        per $\\Sigma$ reading, the full-space cosines of the layer's heads with every layer's target, ``(L, H)``."""
        key = ("E4/E9 layers", tuple((m.n_, float(m.scatter_.diagonal().sum())) for m in self.inputs_),
               tuple(tuple(sorted(d)) for d in self.detail_))
        with self.ctx.analyses_lock:  # a sibling in another thread waits for this analysis instead of repeating it
            if key not in self.ctx.analyses:
                gen = torch.Generator().manual_seed(self.ctx.seed + 4)
                layers = [self._layer(i, gen) for i in range(self.ctx.layers)]
                full = [lay.pop("sigma_full") for lay in layers]
                # (L, D, D) each, the layers' copies freed name by name (not all held beside all the stacks)
                targets = {name: torch.stack([f.pop(name) for f in full]) for name in list(full[0])}
                for i, lay in enumerate(layers):
                    wq, wk = self.ctx.attention[i].to(torch.float32).head_matrices()
                    lay["across"] = {name: c.double().cpu().numpy() for name, c in full_cos(wq, wk, targets).items()}
                self.ctx.analyses[key] = layers
            return self.ctx.analyses[key]

    @staticmethod
    def _heads(layers: list[dict], name: str) -> dict:
        """The sets of heads of reading ``name`` for ``judge_reading`` (the model's, the random ones and the other
        controls), each ``{"cos": key -> (L, H), "deflated": k -> {key -> (L, H)}}``."""

        def at(k: int, h: str) -> dict[str, np.ndarray]:
            return {t: np.stack([lay["spectral"][name][k][h][t] for lay in layers])
                    for t in layers[0]["spectral"][name][k][h]}

        ks = [k for k in layers[0]["spectral"][name] if k]
        return {h: {"cos": at(0, h), "deflated": {k: at(k, h) for k in ks}} for h in layers[0]["spectral"][name][0]}

    def measure(self) -> Measured:
        layers = self._layers()
        cos = {k: np.stack([lay[f"cos_{k}"] for lay in layers]) for k in TARGETS if f"cos_{k}" in layers[0]}  # (L, H)
        rng = np.random.default_rng(self.ctx.seed + 40)
        q95 = np.array([lay["random_q95"] for lay in layers])
        readings = {name: judge_reading(READINGS[name], self._heads(layers, name), q95, rng)
                    for name in (self.readings[:1] if self.ctx.deciding else self.readings)}  # a twin: the deciding
        unconverged = sum(lay["fisher_unconverged"] for lay in layers)
        for name in readings:  # no verdict from eigenvectors the solver did not settle
            if family(name) == "fisher" and unconverged:
                readings[name]["verdict"] = "inconclusive"
        headline = READINGS[self.readings[0]]
        tolerance = range_tolerances(layers, headline, rng)
        tokens = min(lay["sigma_tokens"] for lay in layers)
        metrics: dict = {}
        for name, r in readings.items():
            metrics |= {f"heads_aligned_{name}": r["heads_aligned"], f"mean_margin_{name}": r["mean_margin"],
                        f"mean_margin_{name}_low": r["low"], f"mean_margin_{name}_high": r["high"]}
            for k in applicable(DEFLATIONS, self.ctx.dim):
                d = r[f"deflated_{k}"]
                key = f"deflated_margin_{name}_k{k}"
                metrics |= {key: d["mean_margin"], f"{key}_low": d["low"], f"{key}_high": d["high"]}
            metrics |= {f"median_cos2_{name}": r["median_cos2"], f"max_cos2_{name}": r["max_cos2"]}
        across = np.stack([lay["across"][headline.name] for lay in layers])  # (L, L', H): target layer, layer
        own_layer = own_over_best_other(across.transpose(2, 1, 0)).T  # (L, H): the layer's target against others
        metrics |= specificity(own_layer, f"heads_specific_{headline.name}", f"specificity_margin_{headline.name}",
                               rng)
        fisher = self.readings[1]
        if fisher in readings:
            table = np.stack([lay["own_fisher"][fisher] for lay in layers])  # (L, H', H): target head, head
            metrics |= specificity(own_over_best_other(table), f"heads_own_{fisher}", f"own_head_margin_{fisher}",
                                   rng)
        metrics |= {
            "heads": int(cos["identity"].size),
            f"median_cos_{self.readings[0]}": float(np.median(cos[self.readings[0]])),
            "median_cos_identity": float(np.median(cos["identity"])),
            "median_cos_sigma_inv_ridge": float(np.median([lay["cos_sigma_inv_ridge"] for lay in layers])),
            "sigma_rank_min": min(lay["sigma_rank"] for lay in layers),
            "sigma_tokens": tokens,
            "fisher_heads_clipped": sum(lay["fisher_heads_clipped"] for lay in layers),
            "fisher_unconverged": unconverged,
            "fisher_sequences": len(self.detail_[0]),
        }
        details = {k: [as_list(lay[k]) if isinstance(lay[k], np.ndarray) else lay[k] for lay in layers]
                   for k in layers[0] if not k.startswith(("tolerance_", "spectral", "across", "own_", "trace_"))}
        details["support"] = self._support(layers, readings)
        details["bilinear_form"] = bilinear_form(self.ctx.attention[0].bq, self.ctx.attention[0].bk)
        details["readings"] = {name: {k: v for k, v in r.items() if k != "margin"} for name, r in readings.items()}
        details["range_tolerance"] = tolerance
        details["resampling_unit"] = "layer"
        details["resampling"] = "two-stage bootstrap: layers with replacement, then heads within each drawn layer"
        details["rope"] = (
            "A_h ignores the rotary rotation (offset-0 form); the Fisher uses the model's rotated attention"
            if self.ctx.attention[0].rope
            else "no rotary embedding"
        )
        arrays = {"layers": layers, "readings": readings, "enough_tokens": tokens >= MIN_TOKENS_PER_DIM * self.ctx.dim}
        return Measured(arrays, metrics, details)

    def _support(self, layers: list[dict], readings: dict) -> dict:
        r"""Where each reading's support lies: ``k`` (``e4_support.support_k``) and, for the $\Sigma$ readings, the
        fraction of $\Sigma$'s trace in its top k directions (the layers' mean) at every applicable k."""
        ks = applicable(DEFLATIONS, self.ctx.dim)
        return {"trace_fraction_sigma": mean_fractions([lay["trace_fraction"] for lay in layers]),
                **{f"k_{name}": support_k(r, ks) for name, r in readings.items()}}

    def judge(self, measured: Measured) -> Judgement:
        readings, enough = measured.arrays["readings"], measured.arrays["enough_tokens"]
        controls = [
            Control(f"{CONTROLS[h]} ({READINGS[name].label} reading)", "positive" if h in POSITIVE else "negative",
                    c["verdict"],
                    {"mean_margin": c["mean_margin"], "low": c["low"], "high": c["high"],
                     **({"deflated_margin_k1": c["deflated_1"]["mean_margin"]} if "deflated_1" in c else {}),
                     "old_rule_mean_margin": c["old_rule"]["mean_margin"], "old_rule_low": c["old_rule"]["low"]})
            for name, r in readings.items() for h, c in r["controls"].items()
        ]
        headline = readings[self.readings[0]]["verdict"] if enough else "inconclusive"
        m = measured.metrics
        strength = []
        for name, r in readings.items():
            said = ("aligned more than chance, " + ("weakly" if r["max_cos2"] < WEAK else "strongly")
                    if r["verdict"] == "supported" else r["verdict"].replace("_", " "))
            strength.append(f"{name}: {said} (cos^2 median {r['median_cos2']:.2g}, at most {r['max_cos2']:.2g})")
        name = self.readings[0]
        deflation = ", ".join(f"k={k} {m[f'deflated_margin_{name}_k{k}']:+.3f}"
                              for k in applicable(DEFLATIONS, self.ctx.dim))
        specific = (f"; heads specific to their own layer's target (margin over the best other layer's > 0): "
                    f"{m[f'heads_specific_{name}']} of {m['heads']}, mean margin "
                    f"{m[f'specificity_margin_{name}']:+.3f} [{m[f'specificity_margin_{name}_low']:+.3f}, "
                    f"{m[f'specificity_margin_{name}_high']:+.3f}]" if f"heads_specific_{name}" in m else "")
        fisher = self.readings[1]
        specific += (f"; heads closer to their own {fisher} target than to every other head's of their layer: "
                     f"{m[f'heads_own_{fisher}']} of {m['heads']}, mean margin {m[f'own_head_margin_{fisher}']:+.3f} "
                     f"[{m[f'own_head_margin_{fisher}_low']:+.3f}, {m[f'own_head_margin_{fisher}_high']:+.3f}]"
                     if f"heads_own_{fisher}" in m else "")
        notes = (
            "; ".join(strength)
            + f"; {name} margin over the best rival {m[f'mean_margin_{name}']:+.3f} "
            f"[{m[f'mean_margin_{name}_low']:+.3f}, {m[f'mean_margin_{name}_high']:+.3f}] (layers resampled), "
            "with the target's top k directions "
            f"projected out: {deflation}" + specific
            + f"; on the range of Sigma (eigenvalues > 1e-6 of the largest; smallest rank {m['sigma_rank_min']} of "
            f"{self.ctx.dim})"
            + ("" if enough else f"; inconclusive: {m['sigma_tokens']} kept tokens, fewer than "
               f"{MIN_TOKENS_PER_DIM} D = {MIN_TOKENS_PER_DIM * self.ctx.dim}")
            + f"; {measured.details['rope']}"
        )
        return Judgement(headline, controls, notes)

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir)
        if fig is None:
            return []
        layers = measured.arrays["layers"]
        names = {"sigma_inv": "Sigma^+", "sigma": "Sigma", "fisher_inv": "Fisher^-1", "fisher": "Fisher"}
        for ax, key in zip(axes, self.readings, strict=True):
            rival = READINGS[key].rival
            for i, lay in enumerate(layers):
                jit = i + np.linspace(-0.25, 0.25, len(lay[f"cos_{key}"]))
                ax.scatter(jit, lay[f"cos_{key}"], s=10, c="C0", label=f"cos(A_h, {names[key]})" if i == 0 else None)
                ax.scatter(jit, lay["cos_identity"], s=6, c="C1", marker="x", label="cos(A_h, I)" if i == 0 else None)
                ax.scatter(jit, lay[f"cos_{rival}"], s=6, c="C2", marker="+",
                           label=f"cos(A_h, {names[rival]})" if i == 0 else None)
                ax.hlines(lay["random_q95"], i - 0.3, i + 0.3, color="k",
                          label="random sym(RqRk) q95" if i == 0 else None)
            ax.axhline(0, color="grey", lw=0.5)
            ax.set(xlabel="layer (dots = heads)", ylabel="Frobenius cosine on the range of Sigma",
                   title=f"{self.claim} {self.ctx.title_name}: vs {names[key]}")
            ax.legend(fontsize=6)
        return save(fig, out_dir, f"{self.ctx.slug}_{self.claim.lower()}_alignment.png")


class E9Covariance(E4Alignment):
    """Streaming estimator of E9, the seed's §6 reading (headline ``sigma``, second reading ``fisher``): the same
    statistics and rule as E4 with target and rival exchanged."""

    claim = "E9"
    readings = ("sigma", "fisher")
    method = method("Sigma", "the attention Fisher")
    criterion = criterion("Sigma", "Sigma^+", "attention Fisher")
