r"""A model's self-attention recomputed from its own weights, in any precision.

$$q = W_q x + b_q,\quad k = W_k x + b_k,\quad v = W_v x + b_v,\quad
z_h = \operatorname{softmax}(s\, q_h k_h^\top + M)\, v_h,\quad y = W_o [z_1; \dots; z_H] + b_o$$

with the model's scale $s$ (usually $1/\sqrt{d_{head}}$), rotary embeddings applied to $q, k$
where the model uses them (Llama), key/value heads shared by groups of query heads (GQA) and
a causal mask $M$ for decoders. Models read through their attention kernel
(``expattn.probes.models.taps``) give $q, k, v$ as a map of $x$ instead (whatever their projections,
positions and norms), a soft-cap $c \tanh(\cdot / c)$ of the scaled logits and an additive bias $M$
with their masks and relative-position terms. Used by E4, E5, E7 and E8. ``reference_heads`` is the
recomputation the acceptance check and E5 compare with the head outputs a float32 model produced: the
explicit product, its softmax and sum in float64, so that it shares no kernel with the model's attention
(a half-precision model's: ``expattn.probes.models.rounding``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
from jaxtyping import Float
from torch import Tensor


@dataclass(frozen=True)
class AttnWeights:
    """Projection weights of one self-attention layer (``nn.Linear`` layout: ``(out, in)``).

    Attributes:
        wq, wk, wv: ``(heads*head_dim, dim)``, ``(kv_heads*head_dim, dim)`` twice; biases or None.
        wo: ``(dim, heads*head_dim)``; bo its bias or None.
        heads, kv_heads: number of query heads and of key/value heads (GQA when fewer).
        scale: factor $s$ of the logits.
        causal: decoder mask.
        rope: ``(q, k) -> (q, k)`` rotary embedding on ``(batch, head, token, head_dim)``, or None.
        qkv: ``x -> (q, k, v)`` (``(batch, head | kv_head, token, head_dim)``, rotary and norms applied) with a
            ``to(dtype)`` method, replacing the projections above when given (``wq``... then describe the
            linear part only); None: the projections.
        softcap: $c$ of the soft-cap of the scaled logits, or None.
        bias: ``() -> (1, head | 1, token, token)`` additive bias of the logits (or None), read when they are formed.
        logits_rounded: the model's kernel forms its logits in the model's dtype (eager attention, BLOOM's
            ``baddbmm``), not in float32 as the fused kernels do; only a half-precision model's rounding bound
            (``expattn.probes.models.rounding``) reads it.
    """

    wq: Float[Tensor, "hd_all dim"]
    bq: Float[Tensor, " hd_all"] | None
    wk: Float[Tensor, "kv_hd_all dim"]
    bk: Float[Tensor, " kv_hd_all"] | None
    wv: Float[Tensor, "kv_hd_all dim"]
    bv: Float[Tensor, " kv_hd_all"] | None
    wo: Float[Tensor, "dim hd_all"]
    bo: Float[Tensor, " dim"] | None
    heads: int
    kv_heads: int
    scale: float
    causal: bool
    rope: Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None
    qkv: Callable[[Tensor], tuple[Tensor, Tensor, Tensor]] | None = None
    softcap: float | None = None
    bias: Callable[[], Tensor | None] | None = None
    logits_rounded: bool = False

    @property
    def head_dim(self) -> int:
        return self.wq.shape[0] // self.heads

    def to(self, dtype: torch.dtype) -> AttnWeights:
        """The same weights cast to ``dtype`` (biases too)."""
        cast = {
            name: None if getattr(self, name) is None else getattr(self, name).to(dtype)
            for name in ("wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")
        }
        return replace(self, **cast, qkv=None if self.qkv is None else self.qkv.to(dtype))

    def head_matrices(self) -> tuple[Float[Tensor, "head hd dim"], Float[Tensor, "head hd dim"]]:
        """Rows of $W_q$ and $W_k$ serving each query head: two ``(heads, head_dim, dim)`` tensors (a key
        head shared by a group of query heads is repeated)."""
        wq = self.wq.view(self.heads, self.head_dim, -1)
        wk = self.wk.view(self.kv_heads, self.head_dim, -1)
        return wq, wk.repeat_interleave(self.heads // self.kv_heads, dim=0)


def _project(x: Tensor, w: Tensor, b: Tensor | None, heads: int) -> Tensor:
    y = x @ w.T if b is None else torch.addmm(b, x.flatten(0, -2), w.T).view(*x.shape[:-1], -1)
    return y.view(*x.shape[:-1], heads, -1).transpose(-3, -2)  # (B, H, T, dh)


def queries_keys_values(
    x: Float[Tensor, "batch token dim"], w: AttnWeights, values: bool = True
) -> tuple[
    Float[Tensor, "batch head token hd"], Float[Tensor, "batch head token hd"], Float[Tensor, "batch head token hd"]
    | None
]:
    """Per-head $q$, $k$, $v$ as the model forms them (rotary applied, GQA keys repeated per query head).

    ``values=False``: $v$ is not needed; None is returned in its place (and, where the model's projections are
    plain weights, $W_v x$ is not computed)."""
    if w.qkv is not None:
        q, k, v = w.qkv(x)
    else:
        q = _project(x, w.wq, w.bq, w.heads)
        k = _project(x, w.wk, w.bk, w.kv_heads)
        v = _project(x, w.wv, w.bv, w.kv_heads) if values else None
        if w.rope is not None:
            q, k = w.rope(q, k)
    group = w.heads // w.kv_heads
    v = v.repeat_interleave(group, dim=1) if values else None
    return q, k.repeat_interleave(group, dim=1), v


def attention_logits(
    q: Float[Tensor, "batch head query hd"], k: Float[Tensor, "batch head key hd"], w: AttnWeights
) -> Float[Tensor, "batch head query key"]:
    """$\\operatorname{cap}(s\\, q k^\\top) + M$: the soft-cap and additive bias where the model has them, and
    $-\\infty$ above the diagonal for causal models. ``q``, ``k`` ``(batch, head, token, head_dim)`` (GQA heads
    repeated), the logits ``(batch, head, token, token)``."""
    logits = w.scale * (q @ k.transpose(-1, -2))  # (B, H, T, T)
    if w.softcap is not None:
        logits = w.softcap * torch.tanh(logits / w.softcap)
    bias = None if w.bias is None else w.bias()
    if bias is not None:
        logits = logits + bias.to(logits.dtype)
    if w.causal:
        t = logits.shape[-1]
        future = torch.ones(t, t, dtype=torch.bool, device=logits.device).triu(1)
        logits = logits.masked_fill(future, float("-inf"))
    return logits


def attention_probs(x: Float[Tensor, "batch token dim"], w: AttnWeights) -> Float[Tensor, "batch head query key"]:
    """Attention weights $\\operatorname{softmax}(s\\,qk^\\top + M)$ of every head."""
    q, k, _ = queries_keys_values(x, w, values=False)
    return attention_logits(q, k, w).softmax(-1)


def attend(
    q: Float[Tensor, "batch head query hd"],
    k: Float[Tensor, "batch head key hd"],
    v: Float[Tensor, "batch head key hd"],
    w: AttnWeights,
) -> Float[Tensor, "batch head query hd"]:
    """$\\operatorname{softmax}(s\\,qk^\\top + M)\\,v$ per head, through torch's fused attention kernel where the logits
    are $s\\,qk^\\top$ with at most a causal mask (2.5x faster in float64 on CPU; equal to the explicit product to
    float rounding), through ``attention_logits`` otherwise (a soft-cap or an additive bias). ``q``, ``k``, ``v``
    and the result ``(batch, head, token, head_dim)``."""
    if w.softcap is None and w.bias is None:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=w.causal, scale=w.scale)
    return attention_logits(q, k, w).softmax(-1) @ v


def reference_heads(
    q: Float[Tensor, "batch head query hd"],
    k: Float[Tensor, "batch head key hd"],
    v: Float[Tensor, "batch head key hd"],
    w: AttnWeights,
) -> Float[Tensor, "batch head query hd"]:
    r"""$\operatorname{softmax}(\operatorname{cap}(s\,q k^\top) + M)\, v$ per head by the explicit product: the logits
    (``attention_logits``) in the dtype of ``(batch, head, token, head_dim)`` $q, k, v$ (GQA heads repeated),
    rounded as the model rounds its own, then the softmax and the weighted sum in float64.

    Independent of the kernel the model ran (fused SDPA, its own eager code, a tap's replay): compared with the
    model's head outputs it differs by the rounding of their softmax and sum ($\approx 10^{-7}$ relative in
    float32, within $T\varepsilon$), never by zero through a shared computation. (Logits in float64 too would
    add the model's rounding of $s\,q k^\top$, $\varepsilon\,s\lVert q\rVert\lVert k\rVert$, which exceeds
    $T\varepsilon$ for short sequences of real models.)"""
    logits = attention_logits(q, k, w).double()  # (B, H, T, T)
    return logits.softmax(-1) @ v.double()


def head_outputs(x: Float[Tensor, "batch token dim"], w: AttnWeights) -> Float[Tensor, "batch token hd_all"]:
    """$[z_1; \\dots; z_H]$: what the output projection reads, ``(batch, token, heads*head_dim)``."""
    return attend(*queries_keys_values(x, w), w).transpose(1, 2).flatten(-2)


def attention_branch(x: Float[Tensor, "batch token dim"], w: AttnWeights) -> Float[Tensor, "batch token dim"]:
    """The attention sublayer's update $y = W_o z + b_o$ (no residual, no normalization)."""
    y = head_outputs(x, w) @ w.wo.T
    return y if w.bo is None else y + w.bo


def head_updates(z: Float[Tensor, "batch token hd_all"], w: AttnWeights) -> Float[Tensor, "batch token head dim"]:
    """Each head's share of the update: $u_h = W_o[:, h] z_h$, so that $\\sum_h u_h + b_o = y$."""
    dh = w.head_dim
    zh = z.view(*z.shape[:-1], w.heads, dh)  # (B, T, H, dh)
    wo = w.wo.view(w.wo.shape[0], w.heads, dh)  # (D, H, dh)
    return torch.einsum("bthe,dhe->bthd", zh, wo)
