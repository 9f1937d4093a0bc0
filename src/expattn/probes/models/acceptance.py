r"""The acceptance test of every adapter: recomputed attention equals the model's own, head by head.

$$\frac{\lVert z_{b,t,h} - \hat z_{b,t,h}\rVert}{\lVert \hat z_{b,t,h}\rVert} \le \tau_{b,t,h}
\quad\text{on every token}$$

with $z$ ``(batch, token, head, head_dim)`` the head outputs the model produced (``layers.i.attn.heads``), $\hat z$
the probe's recomputation in float64 from ``layers.i.attn.input`` through the model's own weights in its dtype
(masks, positions and all: the $q, k, v$ its kernel read) and $\tau$ the per-token bound on that kernel's rounding
in the model's dtype (``expattn.probes.models.rounding``: $\approx u(1 + \rho) + 2\rho\Delta$, growing with the
logits' size $\Delta$ and the cancellation $\rho$ of the weighted values). A head beyond it means the adapter
misreads the architecture: an error naming the layer and head, never a verdict.

$\hat z = \operatorname{softmax}(s\,qk^\top + M)\,v$ is computed by the probe's own code, never by the kernel
that produced $z$. Float32 models are judged by the same bound as bfloat16 and float16 ones ($u = 2^{-24}$): a
fixed $T\varepsilon_{32}$ (1.5e-5 at $T = 128$) does not see the logits, and Qwen2.5 1.5B's query and key biases
give its float32 kernel errors of 4.2e-4. A float64 model: $T\varepsilon_{64}$ on each head's largest error.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.models.attention import AttnWeights, queries_keys_values, reference_heads
from expattn.probes.models.rounding import ROUNDED, rounded_reference

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
    """A ``dtype`` (bfloat16, float16, float32) model's head outputs ``z`` ``(batch, token, heads*head_dim)`` against
    their float64 recomputation from ``x`` ``(batch, token, dim)`` through its own weights ``w`` in ``dtype``: the
    relative error per token and the rounding bound it must stay within (``rounding.rounded_reference``), both
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
    model's ``dtype`` (the per-token rounding bound, ``w`` then being the model's own weights; in float64
    $T\\varepsilon$); return the layer's largest relative error otherwise."""
    x, z = tensors["attn.input"][:ROWS], tensors["attn.heads"][:ROWS]
    if dtype in ROUNDED:
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
