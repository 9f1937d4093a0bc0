r"""E7: rank collapse on the pure-attention path of the real weights, with and without skips.

$$\operatorname{res}(X) = \frac{\lVert X - \mathbf 1 \bar x^\top\rVert_F}{\lVert X\rVert_F},\qquad
X_{\ell+1} = \mathrm{SA}_\ell(X_\ell)\ \text{(no skip)},\qquad
X_{\ell+1} = X_\ell + \mathrm{SA}_\ell(X_\ell)\ \text{(skip)}$$

(claim B2 on trained weights; Dong et al. 2021: pure attention loses rank doubly exponentially
with depth). $X_0$ = ``layers.0.input`` (the embeddings) of the detail sequences; $\mathrm{SA}_\ell$
is block $\ell$'s attention branch computed from its weights in float64 (float32 hits its floor
after a few layers): for pre-LN models the branch includes its input normalization
(``norm1``), for post-LN BERT it is attention alone; MLPs and post-norms are left out.
Baseline: the full model's own residual stream (``layers.i.output``). The measure is the decades the
residual loses from the input to the last layer,

$$\text{decades lost} = -\log_{10}(\operatorname{res}_L / \operatorname{res}_0)$$

(positive when it falls: 2 is a 100-fold drop; metrics ``decades_lost_no_skip``, ``_skip``, ``_model``).
Interval: bootstrap over sequences. Criterion (the seed's claim, §3.3): supported when the no-skip path
collapses (interval above 2 decades), not supported when its interval lies below 1 decade, else
inconclusive. Measured beside it, not judged: the skip path's decades lost (Dong et al.'s condition that
skips prevent collapse) and the decay rate, decades lost per layer on the no-skip path (growing
per-layer losses: doubly exponential, as Dong et al. find for encoders; constant ones: exponential, as
masked attention gives). Negative control through the
same rule: the full model's own residual stream, which keeps its rank and must not come out collapsed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor, nn

from expattn.nn.lm import BatchCloudNorm
from expattn.nn.norms import Norm
from expattn.probes.hypotheses.base import Batch, Estimator, Judgement, Measured, ProbeContext, as_list, figure, save
from expattn.probes.hypotheses.published import dong_2021
from expattn.probes.models.attention import attention_branch
from expattn.probes.models.rounding import unit_roundoff
from expattn.probes.sizes import Sizes
from expattn.results.record import Control

if TYPE_CHECKING:
    from expattn.probes.models.subject import Subject

NORM_RTOL_32 = 1e-5  # float32 norms: ~1e-7 relative rounding of their own arithmetic, 1e-5 of the largest output
NORM_ROUNDINGS = 4  # half-precision norms: roundings to their dtype on the path (see ``reproduces``)
COLLAPSED, KEPT = 2.0, 1.0  # decades lost: above COLLAPSED a collapse, below KEPT the rank is kept
FLOOR = 1e-13  # res below this is float64 round-off of the rank-one residual: no rate is read there


def residual_norm(x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch"]:
    """$\\lVert X - \\mathbf 1\\bar x^\\top\\rVert_F / \\lVert X\\rVert_F$ per sequence, ``(batch,)``."""
    return (x - x.mean(-2, keepdim=True)).norm(dim=(-1, -2)) / x.norm(dim=(-1, -2))


# HuggingFace norms known to compute w * x / sqrt(mean(x^2) + eps) (Llama's RMSNorm; Gemma's 1 + w is not one).
WEIGHTED_RMS_NORMS = frozenset({
    "LlamaRMSNorm", "MistralRMSNorm", "MixtralRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Phi3RMSNorm",
    "GraniteRMSNorm", "Olmo2RMSNorm", "T5LayerNorm",
})


def normalize64(x: Float[Tensor, "*batch dim"], module: nn.Module) -> Float[Tensor, "*batch dim"]:
    r"""The block's input normalization applied in float64: ``nn.LayerNorm``; the HuggingFace RMSNorms of
    ``WEIGHTED_RMS_NORMS``, $w \odot x / \sqrt{\overline{x^2} + \epsilon}$ (which would compute in
    float32); or expattn's own normalizations (``expattn.nn.norms``, as the LM wraps them), run as a
    float64 copy of the module. ``x``: ``(..., D)``, float64.

    Raises:
        TypeError: any other module (its formula is not assumed), naming its class.
    """
    if isinstance(module, nn.LayerNorm):
        w = None if module.weight is None else module.weight.double()
        b = None if module.bias is None else module.bias.double()
        return F.layer_norm(x, module.normalized_shape, w, b, module.eps)
    if isinstance(module, (BatchCloudNorm, Norm)):
        return copy.deepcopy(module).double()(x)
    name = type(module).__name__
    if name not in WEIGHTED_RMS_NORMS:
        raise TypeError(
            f"normalization module {name} is not one E7 can apply in float64: nn.LayerNorm, expattn's norms or "
            f"{', '.join(sorted(WEIGHTED_RMS_NORMS))}"
        )
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return module.weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def reproduces(module: nn.Module, width: int, seed: int) -> bool:
    r"""Whether ``normalize64`` reproduces ``module`` (run in its own dtype) on random input ``(2, 3, width)``:
    $\max|y_{64} - y| \le r \max|y|$, both sides fed the same input rounded to the module's dtype.

    $r$ is $10^{-5}$ for a float32 module (its own float32 arithmetic, ~$10^{-7}$). A bfloat16 or float16 module
    rounds its output to its dtype up to three times (HuggingFace's RMSNorms: the normalized input, then its
    product with the weight; a LayerNorm with bias: one rounding of $w\hat x + b$, whose terms may be up to the
    bias larger than $y$), each at most $u\max|y|$ with $u$ the dtype's unit roundoff ($2^{-8}$, $2^{-11}$),
    and computes in float32 inside ($\ll u$): $r = 4u$ (three roundings and one for a partial cancellation of
    $w\hat x$ by the bias). A norm of another formula (Gemma's $(1 + w)$ scaling) differs by $O(1)$."""
    param = next(module.parameters(), None)
    dtype = torch.float32 if param is None else param.dtype
    x = torch.randn(2, 3, width, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)
    x = x.to(param.device) if param is not None else x  # the module's device (its weight multiplies x)
    try:
        mine = normalize64(x.double(), module)
    except TypeError:
        return False
    own = module(x).double()
    rtol = NORM_RTOL_32 if dtype == torch.float32 else NORM_ROUNDINGS * unit_roundoff(dtype)
    return bool((mine - own).abs().max() <= rtol * own.abs().max())


def collapse_verdict(interval) -> str:
    """``supported`` (collapsed) when the interval of the decades lost lies above ``COLLAPSED``, ``not_supported``
    when below ``KEPT``, else ``inconclusive``."""
    if interval[0] > COLLAPSED:
        return "supported"
    return "not_supported" if interval[1] < KEPT else "inconclusive"


class E7Collapse(Estimator):
    """E7 on the detail sequences.

    Fitted: ``inputs_`` (index -> X_0), ``model_res_`` (index -> (L+1,) full-model res).
    """

    claim = "E7"
    tensors = ("input", "output")
    needs = ("attention.softmax", "attention.recomputable", "attention.output.linear", "depth.one_step")
    float64_replay = True
    method = (
        "relative distance to rank one along the attention-only path, float64, with/without skips; "
        "sequence bootstrap"
    )
    criterion = (
        f"supported iff the 95% interval of the decades the no-skip path's residual loses, -log10(res_L / res_0), "
        f"lies above {COLLAPSED:g}; not_supported iff below {KEPT:g}; else inconclusive. The full model's residual "
        "stream, judged by the same rule, must not be supported"
    )


    @staticmethod
    def inapplicable(subject: Subject) -> str | None:
        """E7 recomputes the pre-attention norm in float64 (``normalize64``): where that does not reproduce the
        model's own module on random input (to the rounding of the module's dtype, ``reproduces``), the
        hypothesis does not apply. expattn's own norms run as a float64 copy of the module itself: nothing to
        check. A half-precision model's path runs from its weights upcast to float64, like a float32 model's."""
        adapter, model = subject.adapter, subject.model
        if adapter.norm_position != "pre":
            return None
        for depth in range(len(adapter.blocks(model))):
            module = adapter.norm1(model, depth)
            if module is None or isinstance(module, nn.Identity | BatchCloudNorm | Norm):
                continue
            if not reproduces(module, adapter.attention(model, depth).wo.shape[0], depth):
                return (f"E7's float64 normalization does not reproduce {type(module).__name__}, the norm before "
                        "attention")
        return None

    @staticmethod
    def statistics_bytes(n: Sizes) -> int:
        """The detail sequences' embeddings (float32) and their residual curves over depth."""
        return n.detail * (4 * n.seq_len * n.hidden + 8 * n.depths)

    def __init__(self, ctx: ProbeContext):
        self.ctx = ctx
        self.inputs_: dict[int, Tensor] = {}
        self.model_res_: dict[int, np.ndarray] = {}

    def update(self, i: int, tensors: dict[str, Tensor], batch: Batch) -> None:
        for row, index in enumerate(batch.index.tolist()):
            if index >= self.ctx.detail_sequences:
                continue
            if i == 0:
                self.inputs_[index] = tensors["input"][row].clone()
                self.model_res_[index] = np.zeros(self.ctx.layers + 1)
                self.model_res_[index][0] = float(residual_norm(tensors["input"][row].double()))
            self.model_res_[index][i + 1] = float(residual_norm(tensors["output"][row].double()))

    def merge(self, other: E7Collapse) -> E7Collapse:
        self.inputs_.update(other.inputs_)
        self.model_res_.update(other.model_res_)
        return self

    def paths(self, with_skip: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Residual curves ``(sequence, L+1)`` of the pure-attention path without and with skips (float64); the
        second ``None`` without ``with_skip`` (a twin's run, which leaves out what is reported, not judged)."""
        x0 = torch.stack([self.inputs_[k] for k in sorted(self.inputs_)]).double()  # (S, T, D)
        plain, skip = x0.clone(), x0.clone() if with_skip else None
        curves = [[residual_norm(plain)], [residual_norm(skip)] if with_skip else []]
        with torch.no_grad():
            for i in range(self.ctx.layers):
                w = self.ctx.attention[i].to(torch.float64)
                norm = self.ctx.adapter.norm1(self.ctx.model, i) if self.ctx.adapter.norm_position == "pre" else None

                def branch(x: Tensor, w=w, norm=norm) -> Tensor:
                    return attention_branch(x if norm is None else normalize64(x, norm), w)

                plain = branch(plain)
                curves[0].append(residual_norm(plain))
                if with_skip:
                    skip = skip + branch(skip)
                    curves[1].append(residual_norm(skip))
        return (torch.stack(curves[0], 1).cpu().numpy(),
                torch.stack(curves[1], 1).cpu().numpy() if with_skip else None)

    def measure(self) -> Measured:
        if not self.inputs_:
            raise ValueError("E7 saw no detail sequence; detail_sequences must be >= 1")
        plain, skip = self.paths(with_skip=not self.ctx.deciding)
        model = np.stack([self.model_res_[k] for k in sorted(self.model_res_)])
        drops = {  # decades lost per sequence, -log10(res_L / res_0)
            name: -np.log10(np.maximum(c[:, -1], 1e-300) / c[:, 0])
            for name, c in (("no_skip", plain), ("skip", skip), ("model", model)) if c is not None
        }
        rng = np.random.default_rng(self.ctx.seed + 7)
        picks = rng.integers(0, len(plain), (2000, len(plain)))
        ci = {name: np.quantile(d[picks].mean(1), [0.025, 0.975]) for name, d in drops.items()}
        floor = np.median(plain, 0)
        per_layer = -np.diff(np.log10(np.maximum(floor, 1e-300)))[floor[1:] > FLOOR]  # decades lost per layer
        metrics = {}
        for name, d in drops.items():
            metrics[f"decades_lost_{name}"] = float(d.mean())
            metrics[f"decades_lost_{name}_low"], metrics[f"decades_lost_{name}_high"] = (float(c) for c in ci[name])
        metrics["sequences"] = len(plain)
        if len(per_layer):
            metrics["decades_per_layer_no_skip_first"] = float(per_layer[0])
            metrics["decades_per_layer_no_skip_last"] = float(per_layer[-1])
        details = {
            "res_no_skip": [as_list(np.median(plain, 0))],
            "res_skip": [None if skip is None else as_list(np.median(skip, 0))],
            "res_model": [as_list(np.median(model, 0))],
            "branch": "norm1 + attention (pre-LN)"
            if self.ctx.adapter.norm_position == "pre"
            else "attention only (post-LN)",
            "dtype": "float64",
            "decades_lost_per_layer_no_skip": as_list(per_layer),
        }
        if skip is not None:
            details["skip_path_keeps_rank"] = bool(ci["skip"][1] < KEPT)
            details["published"] = [dong_2021(float(drops["no_skip"].mean()), float(drops["skip"].mean()),
                                              as_list(per_layer))]
        arrays = {"plain": plain, "skip": skip, "model": model, "per_layer": per_layer,
                  **{f"drop_{k}": d for k, d in drops.items()}, **{f"interval_{k}": c for k, c in ci.items()}}
        return Measured(arrays, metrics, details)

    def judge(self, measured: Measured) -> Judgement:
        a = measured.arrays
        control = Control("the full model's residual stream", "negative", collapse_verdict(a["interval_model"]),
                          {"decades_lost": float(a["drop_model"].mean()), "low": float(a["interval_model"][0]),
                           "high": float(a["interval_model"][1])})
        skip = (f"skip path: {a['drop_skip'].mean():.2f} decades lost (reported, not judged); "
                if "drop_skip" in a else "")
        notes = (f"{skip}no-skip decay {', '.join(f'{v:.2f}' for v in a['per_layer'])} decades per layer above the "
                 "float64 floor")
        return Judgement(collapse_verdict(a["interval_no_skip"]), [control], notes)

    def draw(self, measured: Measured, out_dir: Path | None) -> list[str]:
        fig, axes = figure(out_dir, ncols=1, width=7.0)
        if fig is None:
            return []
        ax, depth = axes[0], np.arange(self.ctx.layers + 1)
        for key, label in (("plain", "pure attention, no skip"), ("skip", "pure attention + skip"),
                           ("model", "full model (null)")):
            curves = measured.arrays[key]
            if curves is None:  # the skip path, left out of a twin's run
                continue
            line = ax.plot(depth, np.median(curves, 0), marker="o", ms=3, label=label)[0]
            ax.fill_between(depth, curves.min(0), curves.max(0), color=line.get_color(), alpha=0.15)
        ax.set_yscale("log")
        ax.set(xlabel="depth", ylabel="res(X) = |X - 1 mean| / |X|",
               title=f"E7 {self.ctx.model_name}: rank collapse (float64)")
        ax.legend(fontsize=7)
        return save(fig, out_dir, f"{self.ctx.slug}_e7_collapse.png")
