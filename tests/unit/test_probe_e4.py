"""E4 pieces against independent computations: the regularised inverse, the closed-form random
baseline (Monte Carlo) and the attention Fisher matrix (explicit per-query covariances)."""

from __future__ import annotations

import numpy as np
import torch
from tiny_models import build_tiny

from expattn.probes.adapters import adapter_for
from expattn.probes.attention import attention_probs
from expattn.probes.common import ProbeContext
from expattn.probes.e4_alignment import E4Alignment, random_q95, regularised_inverse, sym_cos


def test_regularised_inverse_matches_float64_inverse(gen):
    a = torch.randn(400, 60, generator=gen, dtype=torch.float64)
    m = a.T @ a / 400
    m[0, 0] *= 1e6  # condition number ~1e6 before the ridge, as for real attention inputs
    inv, lam, clipped = regularised_inverse(m)
    assert clipped == 0
    assert lam == torch.diagonal(m).mean().item() * 1e-2
    ref = torch.linalg.inv(m + lam * torch.eye(60, dtype=torch.float64))
    # float32 Cholesky with the ridge's condition bound (<= 100 D): relative error well under 1e-4
    assert 0 <= ((inv - ref).norm() / ref.norm()).item() < 1e-4


def test_regularised_inverse_clips_negative_eigenvalues(gen):
    q, _ = torch.linalg.qr(torch.randn(30, 30, generator=gen, dtype=torch.float64))
    e = torch.linspace(1, 2, 30, dtype=torch.float64)
    e[0] = -5.0  # an indefinite estimate, as float32 cancellation can produce
    m = (q * e) @ q.T
    inv, _, clipped = regularised_inverse(torch.stack([m, q @ q.T]))
    assert clipped == 1
    lam0 = 1e-2 * torch.diagonal(m).mean().item()
    ref = (q / e.clamp_min(0).add(lam0)) @ q.T  # clip at 0, then add the ridge
    torch.testing.assert_close(inv[0], ref, rtol=1e-9, atol=1e-9)


def test_random_baseline_closed_form_matches_monte_carlo(gen):
    d, r, draws = 40, 4, 4000
    b = torch.randn(d, d, generator=gen, dtype=torch.float64)
    b = b @ b.T + torch.eye(d, dtype=torch.float64)
    rq = torch.randn(draws, r, d, generator=gen, dtype=torch.float64)
    rk = torch.randn(draws, r, d, generator=gen, dtype=torch.float64)
    cos = sym_cos(rq, rk, b).numpy()
    q95 = np.quantile(cos, 0.95)
    # the 95% quantile of 4000 draws has a standard error of about 3% of its value; allow 4 of them
    assert abs(q95 / random_q95(d) - 1) < 0.12
    assert abs(cos.mean()) < 4 * cos.std() / np.sqrt(draws)


def test_fisher_is_the_mean_covariance_under_the_attention_weights(gen):
    model = build_tiny("llama", int(torch.randint(0, 10_000, (1,), generator=gen)), vocab_size=50, hidden_size=16,
                       num_hidden_layers=1, intermediate_size=24, max_position_embeddings=32)
    adapter = adapter_for("llama")
    w = adapter.attention(model, 0)
    ctx = ProbeContext(model, adapter, (w,), 1, 16, torch.zeros(9, dtype=torch.bool), 0, 10, 2, "tiny")
    est = E4Alignment(ctx)
    xs = torch.randn(2, 9, 16, generator=gen)
    est.detail_[0] = {0: xs[0], 1: xs[1]}
    got = est.fisher(0)  # (H, D, D)
    p = attention_probs(xs, w).double()  # (B, H, T, T)
    x = xs.double()
    ref = torch.zeros(4, 16, 16, dtype=torch.float64)
    for b in range(2):
        for h in range(4):
            for i in range(9):
                mean = p[b, h, i] @ x[b]
                centred = x[b] - mean
                ref[h] += (p[b, h, i, :, None] * centred).T @ centred
    ref /= 2 * 9
    # float32 attention weights and products: 1e-5 relative to the matrix scale
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5 * ref.abs().max().item())
