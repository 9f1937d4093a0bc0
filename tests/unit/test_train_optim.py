"""Warm-up + cosine schedule against its closed form; AdamW parameter groups."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from expattn.nn.lm import LM, LMConfig
from expattn.train.optim import adamw, learning_rate


def test_schedule_matches_closed_form(gen):
    lr, min_lr, warmup, total = 3e-3, 2e-4, 17, 211
    steps = np.arange(1, total + 10)
    # independent vectorised formula: linear ramp, then half a cosine period from lr to min_lr
    decay = np.clip((steps - warmup) / (total - warmup), 0, 1)
    cosine = min_lr + 0.5 * (lr - min_lr) * (1 + np.cos(np.pi * decay))
    expected = np.where(steps <= warmup, lr * steps / warmup, cosine)
    got = np.array([learning_rate(int(s), lr, min_lr, warmup, total) for s in steps])
    np.testing.assert_allclose(got, expected, rtol=1e-14, atol=0)  # same formula, float64 rounding
    assert got[warmup - 1] == pytest.approx(lr) and got[total - 1] == pytest.approx(min_lr)
    assert np.all(np.diff(got[warmup - 1 : total]) <= 0)
    mid = warmup + (total - warmup) // 2
    assert learning_rate(mid, lr, min_lr, warmup, total) == pytest.approx(
        min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * (mid - warmup) / (total - warmup)))
    )


def test_schedule_without_warmup_starts_at_peak():
    assert learning_rate(1, 1.0, 0.0, 0, 100) == pytest.approx(0.5 * (1 + math.cos(math.pi / 100)))


@pytest.mark.parametrize(
    ("args", "match"),
    [((0, 1.0, 0.1, 5, 10), "step"), ((1, 1.0, 2.0, 5, 10), "min_lr"), ((1, 1.0, 0.1, 11, 10), "warmup")],
)
def test_schedule_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        learning_rate(*args)


def test_adamw_decays_matrices_only():
    model = LM(LMConfig(vocab_size=7, context=4, layers=1, heads=1, dim=4))
    opt = adamw(model, 1e-3, 0.1)
    decayed, plain = opt.param_groups
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decayed["params"]) and all(p.ndim < 2 for p in plain["params"])
    assert len(decayed["params"]) + len(plain["params"]) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="lr"):
        adamw(model, 0.0, 0.1)
    with pytest.raises(ValueError, match="weight_decay"):
        adamw(model, 1e-3, -1.0)
    assert isinstance(opt, torch.optim.AdamW)
