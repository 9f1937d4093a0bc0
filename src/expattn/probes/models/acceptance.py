r"""The acceptance test of every adapter: recomputed attention equals the model's own, head by head.

$$e_{h} = \max_{b,t} \frac{\lVert \hat z_{b,t,h} - z_{b,t,h}\rVert}{\lVert z_{b,t,h}\rVert} \le T\,\varepsilon$$

with $z$ ``(batch, token, head, head_dim)`` the head outputs the model produced
(``layers.i.attn.heads``), $\hat z$ the probe's recomputation from ``layers.i.attn.input`` and the
adapter's ``AttnWeights`` (masks, positions and all), $T$ the sequence length and $\varepsilon$ the
machine epsilon of the model's dtype (rounding of a length-$T$ weighted sum). A head beyond it means
the adapter misreads the architecture: an error naming the layer and head, never a verdict.

$q, k, v$ come from the model's hidden states through the adapter (for a tapped module, its own projections
replayed), and $\hat z = \operatorname{softmax}(s\,qk^\top + M)\,v$ is then computed by the probe's own code
(``reference_heads``: the logits in the model's dtype, the softmax and the weighted sum in float64), never by
the kernel that produced $z$: $e_h$ is the rounding of the model's own softmax and sum, small but not zero
(about $10^{-7}$ in float32), for every architecture.

A model in bfloat16 or float16: $q, k, v$ are formed by the model's own weights in its dtype (the values its
kernel read), $\hat z$ and the per-token bound $\tau_{b,t,h}$ on the kernel's rounding in that dtype come from
``expattn.probes.models.rounding``, and the rule is $\lVert \hat z - z\rVert / \lVert \hat z\rVert \le \tau$ on every
token ($T\varepsilon$ there would be $T\,2^{-7}$ in bfloat16, 1 at $T = 128$: no check at all).
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.models.attention import AttnWeights, queries_keys_values, reference_heads
from expattn.probes.models.rounding import HALF, rounded_reference

ROWS = 2  # sequences of the first batch checked (the masks and weights are the same for every sequence)


class AttentionMismatch(ValueError):
    """The probe's recomputed attention differs from the model's own on some head."""


def head_errors(
    x: Float[Tensor, "batch token dim"], z: Float[Tensor, "batch token hd_all"], w: AttnWeights
) -> Float[Tensor, " heads"]:
    """``(heads,)`` float64: per head the largest relative error over sequences and tokens, between the model's
    concatenated head outputs ``z`` ``(batch, token, heads*head_dim)`` (``attn.heads``) and their recomputation
    from the attention input ``x`` ``(batch, token, dim)``."""
    with torch.no_grad():
        mine = reference_heads(*queries_keys_values(x, w), w).transpose(1, 2)  # (B, T, H, dh) float64
    b, t = z.shape[:2]
    mine, ref = mine.reshape(b, t, w.heads, -1), z.reshape(b, t, w.heads, -1).double()
    err = (mine - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-30)
    return err.amax((0, 1))


def rounded_errors(
    x: Float[Tensor, "batch token dim"], z: Float[Tensor, "batch token hd_all"], w: AttnWeights, dtype: torch.dtype
) -> tuple[Float[Tensor, "batch head token"], Float[Tensor, "batch head token"]]:
    """A ``dtype`` (bfloat16, float16) model's head outputs ``z`` ``(batch, token, heads*head_dim)`` against their
    float64 recomputation from ``x`` ``(batch, token, dim)`` through its own weights ``w`` in ``dtype``: the relative
    error per token and the rounding bound it must stay within (``rounding.rounded_reference``), both
    ``(batch, head, token)`` float64."""
    with torch.no_grad():
        q, k, v = queries_keys_values(x.to(dtype), w.to(dtype))  # the values the model's kernel read
        mine, tau = rounded_reference(q, k, v, w)  # (B, H, T, dh), (B, H, T)
    b, t = z.shape[:2]
    ref = z.reshape(b, t, w.heads, -1).transpose(1, 2).double()
    err = (ref - mine).norm(dim=-1) / mine.norm(dim=-1).clamp_min(1e-300)
    return err, tau


def check_heads(layer: int, tensors: dict[str, Tensor], w: AttnWeights, dtype: torch.dtype) -> float:
    """Raise ``AttentionMismatch`` naming the worst head of ``layer`` when its error exceeds the tolerance of the
    model's ``dtype`` ($T\\varepsilon$; in bfloat16 and float16 the per-token rounding bound, ``w`` then being the
    model's own weights); return the layer's largest relative error otherwise."""
    x, z = tensors["attn.input"][:ROWS], tensors["attn.heads"][:ROWS]
    if dtype in HALF:
        err, tau = rounded_errors(x, z, w, dtype)
        excess = (err / tau).amax((0, 2))  # (H,): the error in units of its bound
        worst = int(excess.argmax())
        if not bool(excess[worst] <= 1):  # NaN fails too
            raise AttentionMismatch(
                f"layer {layer} head {worst}: the probe's recomputed attention differs from the model's own "
                f"(relative error {float(excess[worst]):.3g} times the {dtype} rounding bound); this architecture is "
                "misread")
        return float(err.max())
    errors = head_errors(x, z, w)
    tol = x.shape[1] * float(torch.finfo(dtype).eps)
    worst = int(errors.argmax())
    if not bool(errors[worst] <= tol):  # NaN fails too
        raise AttentionMismatch(
            f"layer {layer} head {worst}: the probe's recomputed attention differs from the model's own "
            f"(relative error {float(errors[worst]):.3g} > tolerance {tol:.3g}); this architecture is misread"
        )
    return float(errors.max())
