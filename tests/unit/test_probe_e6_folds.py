"""E6's five-fold cross-validated R^2: folds of sequences, each scored by the fit on the other four; on data whose
R^2 is known in closed form, and on noise, whose R^2 is 0."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from expattn.probes.hypotheses.e6_mlp import FOLDS, R2_TOLERANCE, E6Mlp, fold_rows
from expattn.probes.hypotheses.regression import CrossMoments


def test_fold_rows_put_sequence_j_in_fold_j_mod_5():
    index = torch.arange(7, 19)  # consecutive: a slice (a view)
    for fold in range(FOLDS):
        rows = fold_rows(index, fold)
        assert isinstance(rows, slice)
        assert index[rows].tolist() == [j for j in range(7, 19) if j % FOLDS == fold]
    scattered = torch.tensor([3, 8, 13, 4])  # not consecutive: a mask
    assert scattered[fold_rows(scattered, 3)].tolist() == [3, 8, 13]


def _estimator(dim: int, x: torch.Tensor, y: torch.Tensor, sequence: torch.Tensor) -> E6Mlp:
    """An E6 of one layer whose folds hold (x, [y, noise]) token pairs, sequence j in fold j mod 5."""
    e6 = E6Mlp.__new__(E6Mlp)
    e6.ctx = SimpleNamespace(dim=dim, layers=1)
    folds = [CrossMoments(dim, 2 * dim) for _ in range(FOLDS)]
    noise = torch.randn(y.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for k in range(FOLDS):
        rows = sequence % FOLDS == k
        folds[k].update(x[rows], torch.cat((y[rows], noise[rows]), -1))
    e6.folds_ = [folds]
    return e6


def test_five_fold_r2_of_a_linear_map_is_its_population_value():
    # y = x W + e with x ~ N(0, I_8), W entries N(0, 1/8), e ~ N(0, s^2 I): population R^2 = tr(W^T W) /
    # (tr(W^T W) + 8 s^2); each fit reads 4/5 of 20,000 tokens, so the held-out R^2 sits within 0.01 of it
    g = torch.Generator().manual_seed(0)
    d, n, s = 8, 20_000, 0.5
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    w = torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
    y = x @ w + s * torch.randn(n, d, generator=g, dtype=torch.float64)
    signal = float((w * w).sum())
    expected = signal / (signal + d * s**2)
    r2, _, grid = (t.numpy() for t in _estimator(d, x, y, torch.arange(n) // 100)._fits(range(1)))
    assert r2.shape == (2, 1, FOLDS) and grid.shape == (2, 1, 6, FOLDS)  # (update/control, layer, [grid,] fold)
    assert np.all(np.abs(r2[0] - expected) < 0.01)
    assert np.all(np.abs(r2[1]) < 0.01)  # noise: nothing to fit, R^2 about 0 (slightly below, held out)


def test_fewer_sequences_than_folds_use_one_fold_per_sequence_and_one_is_an_error():
    x = torch.randn(40, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    r2 = _estimator(4, x, x, torch.arange(40) // 10)._fits(range(1))[0][0]  # sequences 0-3: fold 4 is empty
    assert r2.shape == (1, 4) and np.all(np.abs(r2.numpy() - 1) < 1e-6)  # y = x: every held-out R^2 is 1
    with pytest.raises(ValueError, match="at least two sequences"):
        _estimator(4, x, x, torch.zeros(40, dtype=torch.long))._fits(range(1))  # one sequence: one fold


def test_float32_fits_stay_within_their_stated_error_of_float64(monkeypatch):
    """E6's fits run in float32 (``PRECISION``). Against the same fits in float64, on statistics whose ``S_xx``
    spans five decades of variance (condition 1e5, as a residual stream's) around a mean far from 0: the ridges
    GCV chooses are the same, and the held-out R^2 at them moves by more than float64 rounding (1e-9: float32 is
    in use) and by less than ``R2_TOLERANCE`` (1e-4: a layer's verdict, R^2 >= 0.9, could flip only within 1e-4
    of the limit; MiniLM's and SmolLM2's layers sit 0.027 and more from it, and moved by at most 1.3e-5 and
    9.6e-5 there). Every ridge of the grid: at most 1e-3 (the smallest ridge, 1e-5 tr S_xx / D, amplifies the
    rounding of the smallest eigenvalues most: 6.4e-4 on SmolLM2)."""
    g = torch.Generator().manual_seed(3)
    d, n = 48, 300
    scales = torch.logspace(-2, 0.5, d, dtype=torch.float64)
    e6 = E6Mlp.__new__(E6Mlp)
    e6.ctx = SimpleNamespace(dim=d, layers=2)
    e6.folds_ = []
    for _ in range(2):
        w = torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
        folds = []
        for _ in range(FOLDS):
            x = 5 + torch.randn(n, d, generator=g, dtype=torch.float64) * scales
            y = torch.cat([x @ w + 0.3 * torch.randn(n, d, generator=g, dtype=torch.float64),
                           torch.randn(n, d, generator=g, dtype=torch.float64)], 1)
            folds.append(CrossMoments(d, 2 * d).update(x, y))
        e6.folds_.append(folds)
    fits = {}
    for dtype in (torch.float64, torch.float32):
        monkeypatch.setattr("expattn.probes.hypotheses.e6_mlp.PRECISION", dtype)
        fits[dtype] = [t.numpy() for t in e6._fits(range(2))]
    (r2_64, ridge_64, grid_64), (r2_32, ridge_32, grid_32) = fits[torch.float64], fits[torch.float32]
    assert np.array_equal(ridge_64, ridge_32)
    assert 1e-9 < np.abs(r2_32 - r2_64).max() < R2_TOLERANCE
    assert np.abs(grid_32 - grid_64).max() < 1e-3
    assert np.all(r2_64[0] > 0.8)  # the fixture's fits explain most of the update: the scale the errors are read at
