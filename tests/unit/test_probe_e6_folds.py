"""E6's five-fold cross-validated R^2: folds of sequences, each scored by the fit on the other four; on data whose
R^2 is known in closed form, and on noise, whose R^2 is 0."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from expattn.probes.hypotheses.e6_mlp import FOLDS, E6Mlp, fold_rows
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
    e6._pair = (dim, 2 * dim, torch.float64)
    folds = [CrossMoments(*e6._pair) for _ in range(FOLDS)]
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
