"""D2 retrieval presets: building blocks vs explicit formulas, quick runs, and verdicts that can fail."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from expattn.catalogue.registry import RunContext
from expattn.presets import d2_hopfield
from expattn.presets import d2_retrieval as d2
from expattn.presets.d2_fixed_vs_changing import FixedVsChanging


def explicit_update(xi: np.ndarray, patterns: np.ndarray, beta: float) -> np.ndarray:
    """X^T softmax(beta X xi), written out in numpy (independent of the fused kernel)."""
    logits = beta * xi @ patterns.T
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ patterns


def test_update_matches_explicit_softmax(gen):
    x = torch.randn(3, 11, 7, generator=gen, dtype=torch.float64)
    xi = torch.randn(3, 5, 7, generator=gen, dtype=torch.float64)
    got = d2.hopfield_update(xi, x, 2.5).numpy()
    want = np.stack([explicit_update(xi[b].numpy(), x[b].numpy(), 2.5) for b in range(3)])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)  # float64 rounding only


def test_separation_matches_loop(gen):
    x = torch.randn(9, 4, generator=gen, dtype=torch.float64)
    xn = x.numpy()
    loop = [min(xn[i] @ xn[i] - xn[i] @ xn[j] for j in range(9) if j != i) for i in range(9)]
    np.testing.assert_allclose(d2.separation(x).numpy(), loop, rtol=0, atol=1e-12)


def test_theorem5_bound_holds_on_random_draws(gen):
    """|f(xi) - x_i| <= 2 (N-1) M exp(-beta (Delta_i - 2 |xi - x_i| M)) on 100 random configurations."""
    for _ in range(100):
        n, d = torch.randint(2, 20, (2,), generator=gen).tolist()
        beta = float(torch.rand((), generator=gen)) * 5 + 0.1
        x = torch.randn(n, d, generator=gen, dtype=torch.float64) * (1 + 2 * torch.rand((), generator=gen).item())
        xi = x + 0.2 * torch.randn(n, d, generator=gen, dtype=torch.float64)
        err = np.linalg.norm(explicit_update(xi.numpy(), x.numpy(), beta) - x.numpy(), axis=-1)
        m = x.norm(dim=-1).max().item()
        bound = 2 * (n - 1) * m * np.exp(-beta * (d2.separation(x).numpy() - 2 * (xi - x).norm(dim=-1).numpy() * m))
        assert (err <= bound * (1 + 1e-12)).all()


def test_fixed_point_iteration_decreases_energy(gen):
    x = torch.randn(12, 6, generator=gen, dtype=torch.float64)
    start = torch.randn(5, 6, generator=gen, dtype=torch.float64)
    xi, energies, iterations, step = d2_hopfield.iterate_to_fixed_point(start, x, 1.7)
    assert step < 1e-10 and iterations < 400
    # The returned state is a fixed point of the explicit update, to the solver tolerance.
    np.testing.assert_allclose(explicit_update(xi.numpy(), x.numpy(), 1.7), xi.numpy(), rtol=0, atol=1e-9)
    # Concave-convex procedure (D1): the energy never rises beyond float64 rounding.
    assert (energies[1:] - energies[:-1]).max().item() <= 1e-12


PRESETS = [d2.OneStepError(), d2.Capacity(), d2.Metastable(), FixedVsChanging()]


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_quick_presets_pass_and_draw(preset, tmp_path):
    record = preset(RunContext(seed=1, out_dir=tmp_path, quick=True))
    assert record.id == "D2" and record.kind == "dynamics"
    assert record.verdict == "pass", record.notes
    assert len(record.plots) == 1
    png = tmp_path / record.plots[0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert all(math.isfinite(v) for v in record.metrics.values())


def test_presets_without_out_dir_draw_nothing():
    record = FixedVsChanging()(RunContext(seed=2, out_dir=None, quick=True))
    assert record.plots == [] and record.verdict == "pass"


def test_broken_update_fails_the_verdicts(monkeypatch):
    """The verdicts can fail: an update that ignores the patterns (returns the query) must be caught."""
    for module in (d2, d2_hopfield):  # the presets and the sweeps they call
        monkeypatch.setattr(module, "hopfield_update", lambda xi, patterns, beta: xi.clone())
    assert d2.OneStepError()(RunContext(seed=0, quick=True)).verdict == "fail"
    assert d2.Capacity()(RunContext(seed=0, quick=True)).verdict == "fail"
    assert FixedVsChanging()(RunContext(seed=0, quick=True)).verdict == "fail"


@pytest.mark.parametrize("beta", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_beta_is_rejected(beta, gen):
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        d2.hopfield_update(x, x, beta)


def test_mismatched_dimensions_are_rejected(gen):
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    with pytest.raises(ValueError, match="xi has dimension 5, expected 3"):
        d2.hopfield_update(torch.randn(2, 5, generator=gen, dtype=torch.float64), x, 1.0)
