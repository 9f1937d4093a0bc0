"""Empirical carrier (A1, A3): masks, weights, extreme logits, sampling, divergences."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import stats

from expattn.core.empirical import Empirical

F64 = torch.float64


def test_key_mask_equals_removing_atoms(gen):
    atoms, eta = torch.randn(9, 4, generator=gen, dtype=F64), torch.randn(3, 4, generator=gen, dtype=F64)
    log_w = torch.randn(9, generator=gen, dtype=F64)
    keep = torch.rand(9, generator=gen) > 0.4
    keep[0] = True
    masked, kept = Empirical(atoms, log_w, keep), Empirical(atoms[keep], log_w[keep])
    for name in ("log_normalizer", "mean", "fisher", "entropy", "expected_log_base"):
        torch.testing.assert_close(getattr(masked, name)(eta), getattr(kept, name)(eta), rtol=0, atol=1e-12)
    torch.testing.assert_close(masked.probs(eta)[:, keep], kept.probs(eta), rtol=0, atol=1e-12)
    assert (masked.probs(eta)[:, ~keep] == 0).all()


def test_per_query_mask_matches_rowwise_removal(gen):
    atoms, eta = torch.randn(2, 7, 3, generator=gen, dtype=F64), torch.randn(2, 4, 3, generator=gen, dtype=F64)
    mask = torch.rand(2, 4, 7, generator=gen) > 0.5
    mask[..., 0] = True
    carrier = Empirical(atoms, mask=mask)
    mean, g = carrier.mean(eta), carrier.log_normalizer(eta)
    for b in range(2):
        for q in range(4):
            row = Empirical(atoms[b, mask[b, q]])
            torch.testing.assert_close(mean[b, q], row.mean(eta[b, q][None])[0], rtol=0, atol=1e-12)
            torch.testing.assert_close(g[b, q], row.log_normalizer(eta[b, q][None])[0], rtol=0, atol=1e-12)


def test_zero_weight_and_uniform_weights(gen):
    atoms, eta = torch.randn(6, 3, generator=gen, dtype=F64), torch.randn(2, 3, generator=gen, dtype=F64)
    w = torch.rand(6, generator=gen, dtype=F64) + 0.1
    w[2] = 0.0
    torch.testing.assert_close(
        Empirical.from_weights(atoms, w).mean(eta),
        Empirical(atoms[w > 0], w[w > 0].log()).mean(eta),
        rtol=0,
        atol=1e-12,
    )
    query_mask = torch.ones(2, 6, dtype=torch.bool)
    query_mask[1, 4] = False
    both = Empirical.from_weights(atoms, w, query_mask).probs(eta)
    assert (both[:, 2] == 0).all() and both[1, 4] == 0 and both[0, 4] > 0
    inv_n = Empirical(atoms, torch.full((6,), -math.log(6), dtype=F64))
    ones = Empirical(atoms)
    torch.testing.assert_close(inv_n.probs(eta), ones.probs(eta), rtol=0, atol=1e-15)
    # weights 1/N shift G by the constant -log N
    torch.testing.assert_close(inv_n.log_normalizer(eta), ones.log_normalizer(eta) - math.log(6), rtol=0, atol=1e-12)


def test_float32_logits_up_to_1e4_match_float64(gen):
    atoms = 100 * torch.randn(2, 16, 8, generator=gen, dtype=F64)
    eta = 100 * torch.randn(2, 5, 8, generator=gen, dtype=F64) / math.sqrt(8)
    logits = eta @ atoms.mT
    assert logits.abs().max() > 1e3  # the regime under test: logits of order 1e3-1e4
    hi, lo = Empirical(atoms), Empirical(atoms.float())
    e32 = eta.float()
    scale = atoms.abs().max().item()
    for name, atol in (("log_normalizer", 5e-3 * scale), ("mean", 1e-3 * scale), ("probs", 1e-3), ("entropy", 1e-3)):
        out32, out64 = getattr(lo, name)(e32), getattr(hi, name)(eta)
        assert torch.isfinite(out32).all(), name
        # float32 logits of size 1e4 carry absolute rounding ~1e-3; outputs inherit it
        torch.testing.assert_close(out32.double(), out64, rtol=1e-4, atol=atol)
    assert torch.isfinite(lo.fisher(e32)).all() and torch.isfinite(lo.kl(e32, e32.flip(1))).all()


def test_entropy_and_kl_match_scipy(gen):
    atoms, log_w = torch.randn(7, 3, generator=gen, dtype=F64), torch.randn(7, generator=gen, dtype=F64)
    carrier = Empirical(atoms, log_w)
    a, b = torch.randn(1, 3, generator=gen, dtype=F64), torch.randn(1, 3, generator=gen, dtype=F64)
    pa, pb = carrier.probs(a)[0].numpy(), carrier.probs(b)[0].numpy()
    assert abs(carrier.entropy(a).item() - stats.entropy(pa)) < 1e-12
    assert abs(carrier.kl(a, b).item() - stats.entropy(pa, pb)) < 1e-12
    assert abs(carrier.bregman(b, a).item() - stats.entropy(pa, pb)) < 1e-12
    assert abs(carrier.expected_log_base(a).item() - pa @ log_w.numpy()) < 1e-12


def test_mean_gradients_match_explicit_softmax(gen):
    atoms = torch.randn(2, 6, 4, generator=gen, dtype=F64, requires_grad=True)
    eta = torch.randn(2, 3, 4, generator=gen, dtype=F64, requires_grad=True)
    weights = torch.randn(2, 3, 4, generator=gen, dtype=F64)
    lib = (Empirical(atoms).mean(eta) * weights).sum()
    ref = ((torch.softmax(eta @ atoms.mT, -1) @ atoms) * weights).sum()
    for g_lib, g_ref in zip(
        torch.autograd.grad(lib, (atoms, eta)), torch.autograd.grad(ref, (atoms, eta)), strict=True
    ):
        torch.testing.assert_close(g_lib, g_ref, rtol=0, atol=1e-12)


def test_fisher_is_hessian(gen):
    carrier = Empirical(torch.randn(8, 3, generator=gen, dtype=F64), torch.randn(8, generator=gen, dtype=F64))
    eta = torch.randn(3, generator=gen, dtype=F64)
    hess = torch.autograd.functional.hessian(lambda e: carrier.log_normalizer(e[None]).sum(), eta)
    torch.testing.assert_close(carrier.fisher(eta[None])[0], hess, rtol=0, atol=1e-12)


def test_sample_frequencies_and_log_prob(gen):
    carrier = Empirical(torch.randn(5, 2, generator=gen, dtype=F64))
    eta = torch.randn(1, 2, generator=gen, dtype=F64)
    n = 20000
    idx, points = carrier.sample(eta, n, generator=gen)
    p = carrier.probs(eta)[0].numpy()
    freq = np.bincount(idx[:, 0].numpy(), minlength=5) / n
    # binomial standard error, 5 of them per atom
    assert (np.abs(freq - p) <= 5 * np.sqrt(p * (1 - p) / n) + 1e-12).all()
    torch.testing.assert_close(points[:, 0], carrier.atoms[idx[:, 0]])
    index = torch.tensor([3])
    torch.testing.assert_close(carrier.log_prob(index, eta), carrier.log_probs(eta)[:, 3])
