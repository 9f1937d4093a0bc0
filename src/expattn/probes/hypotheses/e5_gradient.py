r"""E5, the probe's self-check: on the model's own weights, attention with values = keys is the gradient of log Z.

$$\operatorname{softmax}(s\,q K^\top + M)\,K = \frac1s \nabla_q \operatorname{logsumexp}(s\,q K^\top + M),
\qquad s = 1/\sqrt{d_{head}}$$

(claim A3 checked on every head of every layer, seed 000 Prop. 1a). $q, K$ are the model's own
queries and keys on real text: projections of ``layers.i.attn.input`` with rotary embedding,
repeated key heads (GQA) and the causal mask where the model has them. That these are the model's
real $q, K$ is checked too: with the model's $V$ the same recomputation must reproduce
``layers.i.attn.heads``, the head outputs the model produced (reconstruction error; recomputed by
the probe's own code, softmax and sum in float64, ``rounding.rounded_reference``, so that it shares no kernel with
the model). The identity's sides are float32, and each query's error is judged against the bound on their
float32 rounding derived from its own logits and keys, $\tau_\nabla$ (``expattn.probes.models.rounding.
identity_bound``: it grows with the logits' size $\lvert m\rvert$, the sequence length $T$ and the cancellation of
the weighted keys, $u_{32} = 2^{-24}$). The reconstruction is judged per token against the bound on the kernel's
rounding in the model's dtype, $\lVert z - \hat z\rVert / \lVert\hat z\rVert \le \tau \approx u(1 + \rho) + 2\rho\Delta$
with $u$ its unit roundoff ($2^{-24}$, $2^{-8}$, $2^{-11}$ in float32, bfloat16, float16), $\rho$ the cancellation of
the weighted values and $\Delta$ the logits' rounding (``expattn.probes.models.rounding`` derives it; a fixed
$T\varepsilon_{32}$ does not see the logits, and Qwen2.5 1.5B's float32 kernel errs by 27 times it); the
reconstruction error in units of $\tau$ is a kind of its own. A model in bfloat16 or float16: $q, k, v$ are formed
by its own weights in its dtype (the values its kernel read), and the identity and its controls run on them in
float32 (same rule, $\tau_\nabla$).
A float64 evaluation shows the rounding floor.
E5 is a self-check, not an estimate: it runs on a fixed sample, every head of every layer over the first
``SEQUENCES`` detail sequences (all their tokens), whatever the token budget.
This is an identity, so on real weights it can fail only through the probe itself: a failure means the
probe's recomputation of attention (projections, rotary embedding, GQA, mask, scale) is wrong for that model, and the
other hypotheses' attention-based numbers cannot be trusted. Negative controls, judged by the same rule:
the temperature doubled ($s \to 2s$ inside the gradient: wrong for every model, also one whose
scale is 1), and values that are the keys shuffled
across positions (the logits keep the true keys; shuffling the keys themselves would change
nothing, the gradient being a function of the set of keys),
both of which must fail: some query's error above its own bound $\tau_\nabla$.
Interval: 95% bootstrap over the detail sequences of the mean per-sequence max error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.hypotheses.base import Batch, Estimator, Judgement, Measured, ProbeContext, as_list, figure, save
from expattn.probes.models.attention import attend, attention_logits, queries_keys_values
from expattn.probes.models.rounding import HALF, describe, identity_bound, rounded_reference
from expattn.probes.sizes import Sizes
from expattn.results.record import Control

if TYPE_CHECKING:
    from expattn.probes.models.subject import Subject

SEQUENCES = 8  # detail sequences E5 checks: 8 x T tokens on every head is a self-check's sample, not an estimate


def relative_error(a: Float[Tensor, "*batch dim"], b: Float[Tensor, "*batch dim"]) -> Float[Tensor, "*batch"]:
    """$\\lVert a - b\\rVert / \\lVert b\\rVert$ over the last dim (float64 result)."""
    a, b = a.double(), b.double()
    return (a - b).norm(dim=-1) / b.norm(dim=-1).clamp_min(1e-30)


def gradients_of_log_normalizer(
    q: Float[Tensor, "batch head query hd"], k: Float[Tensor, "batch head key hd"], w, factors: tuple[float, ...]
) -> tuple[list[Float[Tensor, "batch head query hd"]], Float[Tensor, "batch head query key"]]:
    """$\\frac1s\\nabla_q \\sum \\operatorname{logsumexp}(c\\,(s\\,qK^\\top + M))$ by autograd for each
    factor $c$ ($c = 2$: the temperature doubled), through one product of the logits; and the logits (detached)."""
    with torch.enable_grad():
        q = q.detach().clone().requires_grad_(True)
        logits = attention_logits(q, k, w)
        grads = [torch.autograd.grad(torch.logsumexp(logits * c, -1).sum(), q, retain_graph=True)[0] / w.scale
                 for c in factors]
    return grads, logits.detach()


class E5Gradient(Estimator):
    """E5 on the detail sequences. Fitted: ``errors_`` (index -> (L, H) arrays of the ``KINDS`` of error)."""

    claim = "E5"
    tensors = ("attn.input", "attn.heads")
    needs = ("attention.softmax", "attention.recomputable", "logits.uncapped")
    float64_replay = True
    kind = "identity"
    method = "float32 attention with V=K vs autograd gradient of logsumexp on the model's q, K (rotary, GQA, causal)"
    criterion = (
        "pass iff on every query of every head of every layer (the first 8 detail sequences, a fixed sample) the "
        "identity error is <= its float32 rounding bound tau_grad (from its logits' size, T and the keys' "
        "cancellation) and on every token the reconstruction error (the model's own head outputs, {dtype}) is <= "
        "the bound tau = u + (1+u) rho ((1+u) exp(2 Delta) - 1 + T u32) on the kernel's rounding (rho = sum_j p_j "
        "|v_j| / |z|, Delta the logits' rounding); each negative control must exceed tau_grad on some query"
    )
    KINDS = ("identity_f32", "f32_vs_f64", "reconstruction", "null_wrong_temperature", "null_shuffled_values",
             "identity_over_bound", "null_wrong_temperature_over_bound", "null_shuffled_values_over_bound",
             "reconstruction_over_bound")

    @staticmethod
    def inapplicable(subject: Subject) -> str | None:
        """E5 checks attention to float32 rounding, or to the rounding bound of bfloat16 and float16: not in
        another dtype."""
        if subject.dtype == torch.float32 or subject.dtype in HALF:
            return None
        return (f"the model runs in {str(subject.dtype).removeprefix('torch.')}; E5 checks attention to float32, "
                "bfloat16 or float16 rounding (probe in one of those for E5)")

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """Per detail sequence, kind of error, layer and head: one float64 error."""
        return 8 * min(n.detail, SEQUENCES) * len(E5Gradient.KINDS) * n.layers * n.heads

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        self.dtype = next(ctx.model.parameters()).dtype
        self.half = self.dtype in HALF
        self.criterion = self.criterion.format(dtype=describe(self.dtype))
        if self.half:
            self.method = (f"{self.method}; q, k, v by the model's own weights in {describe(self.dtype)}, its head "
                           "outputs against the float64 attention of those within the rounding bound")
        self.errors_: dict[int, np.ndarray] = {}  # index -> (kinds, L, H)
        self.seq_len_ = 0
        self._pending: list[tuple[int, Tensor, Tensor]] = []  # (layer, indices, errors) on the data's device

    def _flush(self) -> None:
        """The pending per-head errors into ``errors_``: read to the host once, after the pass (not per block)."""
        for i, index, per_head in self._pending:
            per_head = per_head.cpu().numpy()  # (B, kinds, H): max over tokens
            for row, seq in enumerate(index.tolist()):
                table = self.errors_.setdefault(seq, np.zeros((len(self.KINDS), self.ctx.layers, per_head.shape[2])))
                table[:, i] = per_head[row]
        self._pending = []

    def __getstate__(self) -> dict:
        self._flush()
        return super().__getstate__()

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        rows = batch.index < min(self.ctx.detail_sequences, SEQUENCES)
        if not rows.any():
            return
        w = self.ctx.attention[i]
        x = tensors["attn.input"][rows]
        b, t = x.shape[:2]
        self.seq_len_ = t
        with torch.no_grad():
            if self.half:  # the model's own q, k, v in its dtype (its weights; the float32 copies would round them)
                own = self.ctx.adapter.attention(self.ctx.model, i).to(self.dtype)
                q_own, k_own, v_own = queries_keys_values(x.to(self.dtype), own)
                q, k, v = q_own.float(), k_own.float(), v_own.float()
            else:
                q, k, v = queries_keys_values(x, w)  # (B, H, T, dh)
        (grad, wrong), logits = gradients_of_log_normalizer(q, k, w, (1.0, 2.0))
        with torch.no_grad():
            p = logits.softmax(-1)
            out = p @ k  # values = keys
            model_z = tensors["attn.heads"][rows].view(b, t, w.heads, -1).transpose(1, 2)
            if self.half:  # the float32 floor on the same q, K
                out64 = attend(q.double(), k.double(), k.double(), w)
            else:
                w64 = w.to(torch.float64)
                q64, k64, _ = queries_keys_values(x.double(), w64, values=False)
                out64 = attend(q64, k64, k64, w64)
            bound = identity_bound(logits, k)  # (B, H, T)
        perm = torch.randperm(t, generator=torch.Generator().manual_seed(self.ctx.seed + i))
        with torch.no_grad():  # (B, H, T, dh), (B, H, T): the model's own q, k, v (in float32: q, k, v themselves)
            ref, tau = rounded_reference(q_own, k_own, v_own, own) if self.half else rounded_reference(q, k, v, w)
        reconstruction = relative_error(model_z, ref)
        errs = [
            relative_error(grad, out),
            relative_error(out, out64),
            reconstruction,
            relative_error(wrong, out),
            relative_error(grad, p @ k[:, :, perm]),
        ]
        errs += [errs[0] / bound, errs[3] / bound, errs[4] / bound, reconstruction / tau]
        # (B, kinds, H): max over tokens, kept on the data's device until measure (no host read per block)
        self._pending.append((i, batch.index[rows], torch.stack([e.amax(-1) for e in errs], dim=1)))

    def merge(self, other: E5Gradient) -> E5Gradient:
        self._flush()
        other._flush()
        self.errors_.update(other.errors_)
        self.seq_len_ = max(self.seq_len_, other.seq_len_)
        return self

    def measure(self) -> Measured:
        self._flush()
        if not self.errors_:
            raise ValueError("E5 saw no detail sequence; detail_sequences must be >= 1")
        errs = np.stack([self.errors_[k] for k in sorted(self.errors_)])  # (S, kinds, L, H)
        worst = errs.max(0)  # (kinds, L, H)
        per_seq = errs[:, 0].max((1, 2))
        rng = np.random.default_rng(self.ctx.seed + 5)
        boot = per_seq[rng.integers(0, len(per_seq), (2000, len(per_seq)))].mean(1)
        lo, hi = np.quantile(boot, [0.025, 0.975])
        metrics = {
            "max_error": float(worst[0].max()),
            "max_error_over_bound": float(worst[5].max()),
            "max_reconstruction_error": float(worst[2].max()),
            "max_f32_vs_f64_error": float(worst[1].max()),
            "min_null_error": float(worst[3].min()),
            "min_shuffled_values_error": float(worst[4].min()),
            "min_null_over_bound": float(worst[6].min()),
            "min_shuffled_values_over_bound": float(worst[7].min()),
            "mean_seq_max_error_low": float(lo),
            "mean_seq_max_error_high": float(hi),
            "heads_checked": int(worst[0].size),
            "sequences": len(per_seq),
        }
        metrics["max_reconstruction_over_bound"] = float(worst[8].max())
        details = {kind: [as_list(row) for row in worst[k]] for k, kind in enumerate(self.KINDS)}
        details["rounding"] = describe(self.dtype)
        w = self.ctx.attention[0]
        details["features"] = {"rope": w.rope is not None, "gqa": w.kv_heads < w.heads, "causal": w.causal}
        return Measured({"worst": worst}, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        worst = measured.arrays["worst"]
        controls = [
            Control(name, "negative", "pass" if worst[k].max() <= 1 else "fail",
                    {"max_error_over_bound": float(worst[k].max()), "min_over_heads": float(worst[k].min()),
                     "max_error": float(worst[raw].max())})
            for k, raw, name in ((6, 3, "temperature doubled (s -> 2s)"),
                                 (7, 4, "values = keys shuffled across positions"))
        ]
        ok = worst[5].max() <= 1 and worst[8].max() <= 1  # 8: the reconstruction error / its bound, per token
        notes = (
            "self-check of the probe, not a hypothesis about trained models: a fail means the probe's attention "
            "recomputation is wrong for this model"
        )
        return Judgement("pass" if ok else "fail", controls, notes)

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir, ncols=1, width=7.0)
        if fig is None:
            return []
        worst = measured.arrays["worst"]
        ax, x = axes[0], np.arange(self.ctx.layers)
        judged = [(5, "identity"), (6, "control: temperature doubled"), (7, "control: values shuffled"),
                  (8, "reconstruction")]
        for k, label in judged:
            ax.plot(x, np.maximum(worst[k].max(1), 1e-12), marker="o", ms=3, label=f"{label} (max over heads)")
        ax.axhline(1.0, color="k", ls="--", lw=0.8, label="its rounding bound")
        ax.set_yscale("log")
        ax.text(0.01, 0.01, "exact zeros drawn at 1e-12", transform=ax.transAxes, fontsize=7)
        title = f"E5 {self.ctx.model_name}: softmax(qK)K vs grad_q log Z"
        ax.set(xlabel="layer", ylabel="max error / its bound", title=title)
        ax.legend(fontsize=7)
        return save(fig, out_dir, f"{self.ctx.slug}_e5_gradient.png")
