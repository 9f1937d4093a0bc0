"""The acceptance check of a float32 model with Qwen-sized query and key biases: its kernel's own rounding of large
logits passes, a misread does not.

Qwen2.5 1.5B in float32 stopped at its first batch: "layer 0 head 1: the probe's recomputed attention differs from
the model's own (relative error 0.00042 > tolerance 1.53e-05)". Its fused kernel forms the logits in another order
than the probe's product (the scale applied to q and k before their product), and with logits in the hundreds the
two float32 roundings differ by far more than $T\\varepsilon_{32}$. The check now judges every token against the
bound on the kernel's rounding in the model's dtype (``rounding.rounded_reference``), as for bfloat16.
"""

from __future__ import annotations

import pytest
import torch

from expattn.probes.models.acceptance import AttentionMismatch, check_heads
from expattn.probes.models.attention import AttnWeights

T, DIM, HEADS, HEAD_DIM = 128, 64, 2, 32
KEY_BIAS_STD, QUERY_BIAS_STD = 35.0, 8.0  # Qwen2.5-Coder-0.5B, layer 0


def _weights() -> AttnWeights:
    gen = torch.Generator().manual_seed(0)
    hd = HEADS * HEAD_DIM

    def rand(*shape, std=1.0):
        return std * torch.randn(*shape, generator=gen)

    return AttnWeights(wq=rand(hd, DIM, std=DIM**-0.5), bq=rand(hd, std=QUERY_BIAS_STD),
                       wk=rand(hd, DIM, std=DIM**-0.5), bk=rand(hd, std=KEY_BIAS_STD),
                       wv=rand(hd, DIM, std=DIM**-0.5), bv=None, wo=rand(DIM, hd), bo=None,
                       heads=HEADS, kv_heads=HEADS, scale=HEAD_DIM**-0.5, causal=True)


def _fused_kernel(x: torch.Tensor, w: AttnWeights, scale: float) -> torch.Tensor:
    """Float32 attention as a fused kernel forms it: q and k each scaled by $\\sqrt s$ before their product, the
    softmax and the sum in float32; ``(batch, token, heads*head_dim)``."""
    b = x.shape[0]

    def heads(t):
        return t.view(b, T, HEADS, HEAD_DIM).transpose(1, 2)

    q, k, v = heads(x @ w.wq.T + w.bq), heads(x @ w.wk.T + w.bk), heads(x @ w.wv.T)
    root = scale**0.5
    logits = (q * root) @ (k * root).mT
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return (logits.softmax(-1) @ v).transpose(1, 2).reshape(b, T, HEADS * HEAD_DIM)


def test_a_float32_kernels_rounding_of_large_logits_passes_and_a_misread_fails():
    w = _weights()
    x = torch.randn(2, T, DIM, generator=torch.Generator().manual_seed(1))
    z = _fused_kernel(x, w, w.scale)
    # the logits are Qwen-sized, and the kernel's float32 rounding of them is beyond T eps32 of the old rule
    q, k = (x @ w.wq.T + w.bq), (x @ w.wk.T + w.bk)
    assert (q[0, :, :HEAD_DIM] @ k[0, :, :HEAD_DIM].T).abs().max() * w.scale > 100
    exact = _fused_kernel(x.double(), w.to(torch.float64), w.scale)
    err = ((z.double() - exact).norm(dim=-1) / exact.norm(dim=-1)).max()
    assert err > T * torch.finfo(torch.float32).eps, float(err)
    assert 0 < check_heads(0, {"attn.input": x, "attn.heads": z}, w, torch.float32) < 1
    swapped = z.view(2, T, HEADS, HEAD_DIM).flip(2).reshape(2, T, HEADS * HEAD_DIM)  # the heads read in another order
    with pytest.raises(AttentionMismatch, match="layer 3 head"):
        check_heads(3, {"attn.input": x, "attn.heads": swapped}, w, torch.float32)
    # where the logits are small the bound is float32's: outputs off by 1e-3 of themselves fail
    small = _fused_kernel(x, w, 1e-3 * w.scale)
    assert check_heads(0, {"attn.input": x, "attn.heads": small}, _scaled(w, 1e-3), torch.float32) < T * 2**-24
    with pytest.raises(AttentionMismatch):
        check_heads(0, {"attn.input": x, "attn.heads": small * (1 + 1e-3)}, _scaled(w, 1e-3), torch.float32)


def _scaled(w: AttnWeights, factor: float) -> AttnWeights:
    from dataclasses import replace

    return replace(w, scale=factor * w.scale)
