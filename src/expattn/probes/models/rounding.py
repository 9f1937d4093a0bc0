r"""The rounding a model's attention kernel may add: a per-token bound on its head outputs.

A model in bfloat16, float16 or float32 hands its kernel $q, k, v$ in its dtype, and the probe recomputes them
with the model's own weights in that dtype (the same values). What the kernel then adds is rounding only:

1. the logits $\ell_j = \operatorname{cap}(s\,q\cdot k_j) + b_j$: a float32 dot product of length $d$, the
   scale and the bias addition, $(d + 2)\,u_{32}$ relative to $m = \max_j (s\lVert q\rVert\lVert k_j\rVert + |b_j|)$
   (plus $c$, the soft-cap, where there is one); a kernel that forms them in the model's dtype
   (``AttnWeights.logits_rounded``: eager attention, BLOOM's ``baddbmm``) adds one rounding $u$ of that
   size per step (product, scale, bias; three more for the soft-cap's division, tanh and product), so
   $|\delta\ell_j| \le \Delta = ((d + 2)\,u_{32} + n\,u_\ell)\,m$;
2. the softmax of perturbed logits: $p'_j = p_j e^{\delta\ell_j - \bar\delta}$ with $\bar\delta$ a mean of the
   $\delta\ell$, so $|p'_j - p_j| \le p_j (e^{2\Delta} - 1)$;
3. the probabilities rounded to the dtype before their product with $v$ (fused kernels multiply $P$ in the
   dtype, eager ones cast the softmax back): $p''_j = p'_j (1 + \eta_j)$, $|\eta_j| \le u$;
4. the sum $\sum_j p''_j v_j$ accumulated in float32 ($T u_{32}$ relative to $A = \sum_j p_j\lVert v_j\rVert$) and
   the result rounded to the dtype ($u\lVert z'\rVert$).

With $z$ the exact head output and $\rho = A / \lVert z\rVert \ge 1$ (how much the weighted values cancel), the
model's $z''$ obeys, to all orders in $u$ under this model of the kernel,

$$\frac{\lVert z'' - z\rVert}{\lVert z\rVert} \le \tau
= u + (1 + u)\,\rho\,\bigl((1 + u)\,e^{2\Delta} - 1 + T u_{32}\bigr) \approx u\,(1 + \rho) + 2\rho\Delta,$$

$u = 2^{-8}$ in bfloat16, $2^{-11}$ in float16 and $u_{32} = 2^{-24}$ in float32 (half of ``torch.finfo(dtype).eps``).
In float32 the bound is what a fixed $T\varepsilon_{32}$ is not: it grows with the logits' size (Qwen2.5 1.5B's query
and key biases give a float32 kernel relative errors up to 4.2e-4 against its own float64 attention, 27 times
$T\varepsilon_{32}$ at $T = 128$; MiniLM's stay near 1e-7, and $\tau \ge \rho T u_{32}$). The
constant is 1: every term is a worst case (all roundings aligned), none is fitted. On tiny models of the
tested families the measured error is 0.3 to 0.6 of $u(1 + \rho)$, also with logits of size 100 (BLOOM,
whose kernel rounds its logits, up to 1.6, within its $\Delta$ term); head outputs off by a factor $1 + 10u$ or
a tap that adds one to a logit exceed it (``tests/integration/test_probe_half_precision.py``).
The float64 reference is compared unrounded: rounding it to the dtype as well would add another $u$ and
hide a one-ulp error behind a tie.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.models.attention import AttnWeights, attention_logits

U32 = float(torch.finfo(torch.float32).eps) / 2
HALF = (torch.bfloat16, torch.float16)
ROUNDED = (*HALF, torch.float32)  # the dtypes whose kernel rounding ``rounded_reference`` bounds


def unit_roundoff(dtype: torch.dtype) -> float:
    """$u$: the largest relative error of rounding to ``dtype`` (round to nearest), half its machine epsilon."""
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    return float(torch.finfo(dtype).eps) / 2


def rounded_reference(
    q: Float[Tensor, "batch head query hd"],
    k: Float[Tensor, "batch head key hd"],
    v: Float[Tensor, "batch head key hd"],
    w: AttnWeights,
) -> tuple[Float[Tensor, "batch head query hd"], Float[Tensor, "batch head query"]]:
    r"""$z = \operatorname{softmax}(\operatorname{cap}(s\,qk^\top) + M)\,v$ in float64 from the model's own
    ``q``, ``k``, ``v`` ``(batch, head, token, head_dim)`` in its dtype (GQA heads repeated), and $\tau$
    ``(batch, head, token)``, the bound of the module docstring on the relative error of the kernel's head outputs
    in their dtype.

    Raises:
        TypeError: ``q`` not bfloat16, float16 or float32.
    """
    if q.dtype not in ROUNDED:
        raise TypeError(f"q must be bfloat16, float16 or float32 (the model's own queries), got {q.dtype}")
    u = unit_roundoff(q.dtype)
    q64, k64, v64 = q.double(), k.double(), v.double()
    p = attention_logits(q64, k64, w).softmax(-1)  # (B, H, T, T)
    z = p @ v64  # (B, H, T, dh)
    size = w.scale * q64.norm(dim=-1, keepdim=True) * k64.norm(dim=-1).unsqueeze(-2)  # s|q||k_j|, (B, H, T, T)
    bias = None if w.bias is None else w.bias()
    if bias is not None:
        size = size + bias.double().abs()
    steps = 3
    if w.softcap is not None:
        size, steps = size + w.softcap, steps + 3
    m = size.masked_fill(p == 0, 0.0).amax(-1)  # over the keys each query attends to, (B, H, T)
    delta = ((q.shape[-1] + 2) * U32 + (steps * u if w.logits_rounded else 0.0)) * m
    rho = (p @ v64.norm(dim=-1, keepdim=True)).squeeze(-1) / z.norm(dim=-1).clamp_min(1e-300)  # A / |z|
    tau = u + (1 + u) * rho * ((1 + u) * torch.exp(2 * delta) - 1 + k.shape[-2] * U32)
    return z, tau


def describe(dtype: torch.dtype) -> str:
    """``'bfloat16 (u = 2^-8)'``: the dtype and its unit roundoff, for records."""
    return f"{str(dtype).removeprefix('torch.')} (u = 2^{round(math.log2(unit_roundoff(dtype)))})"


def identity_bound(
    logits: Float[Tensor, "batch head query key"], k: Float[Tensor, "batch head key hd"]
) -> Float[Tensor, "batch head query"]:
    r"""$\tau_{\nabla}$ ``(batch, head, query)``: the bound on the float32 rounding of E5's identity,
    $\lVert \frac1s\nabla_q \operatorname{logsumexp}(\ell) - \operatorname{softmax}(\ell) K\rVert / \lVert PK\rVert$,
    both sides formed from the same float32 logits $\ell$ and keys $K$.

    The two sides differ only in how they form $p_j$ and sum $\sum_j p_j k_j$. The gradient's
    $\tilde p_j = e^{\ell_j - \mathrm{lse}}$ carries the rounding of $\mathrm{lse}$, $u_{32}\lvert\mathrm{lse}\rvert
    \le u_{32}(\lvert m\rvert + \log T)$ with $m = \max_j \ell_j$, common to every $j$ (so a relative error of the
    whole sum, not amplified by cancellation), and per key the subtraction $\ell_j - \mathrm{lse}$
    ($u_{32}\lvert\ell_j - m\rvert$ plus $u_{32}\log T$) and its exponential; the softmax's
    $p_j = e^{\ell_j - m} / \sum_i e^{\ell_i - m}$ the subtraction, the exponential, a length-$T$ sum and a division;
    each side's product with $K$ a length-$T$ float32 sum and, for the gradient, the scale's product and division.
    Weighted by $a_j = p_j \lVert k_j\rVert$, with $A = \sum_j a_j$, $\rho = A / \lVert PK\rVert$ and
    $\Lambda = \sum_j a_j \lvert\ell_j - m\rvert / A$:

    $$\tau_{\nabla} = u_{32}\,(\lvert m\rvert + \log T + 1) + u_{32}\,\rho\,(2\Lambda + 2\log T + 3T + 6).$$

    Every term is a first-order worst case (all roundings aligned); none is fitted. Large logits (Qwen2's query
    and key biases give $\lvert m\rvert$ in the hundreds) raise it; a fixed $T\varepsilon_{32}$ does not see them.
    """
    ell = logits.double()
    p = ell.softmax(-1)
    kept = p > 0  # the keys each query attends to (masked keys have p = 0)
    m = ell.masked_fill(~kept, float("-inf")).amax(-1)  # (B, H, T)
    a = p * k.double().norm(dim=-1).unsqueeze(-2)  # p_j |k_j|, (B, H, T, T)
    big_a = a.sum(-1)
    rho = big_a / (p @ k.double()).norm(dim=-1).clamp_min(1e-300)
    spread = (a * (ell - m.unsqueeze(-1)).abs().masked_fill(~kept, 0.0)).sum(-1) / big_a.clamp_min(1e-300)
    t = k.shape[-2]
    log_t = math.log(t)
    return U32 * (m.abs() + log_t + 1) + U32 * rho * (2 * spread + 2 * log_t + 3 * t + 6)
