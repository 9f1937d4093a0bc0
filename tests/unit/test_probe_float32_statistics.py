"""Float32 accumulators (``dtype=torch.float32`` of ``Moments`` and ``CrossMoments``) against the float64 ones
on the same float32 batches, on data whose mean is 10^4 times its spread.

Error bound: every merge rounds the running scatter twice in float32 (the added batch scatter, the Chan
term), each time by at most eps32 of an entry's magnitude, and $|S_{ij}| \\le \\sqrt{S_{ii} S_{jj}}$ of the
final scatter, so after B merges the error in correlation units, $|\\Delta S_{ij}| / \\sqrt{S_{ii}S_{jj}}$, is at
most about 3 B eps32 (one more rounding for the cast of the batch scatter). An uncentred float32 sum of
$x x^\\top$ (the negative control) loses everything: its rounding is relative to $\\lVert\\mu\\rVert^2$,
10^8 times the spread.
"""

from __future__ import annotations

import pytest
import torch

from expattn.probes.hypotheses.regression import CrossMoments
from expattn.probes.statistics.stats import Moments

EPS32 = torch.finfo(torch.float32).eps
BATCHES, TOKENS, DIM, OFFSET = 300, 64, 6, 1e4


def _batches(gen: torch.Generator) -> list[torch.Tensor]:
    mix = torch.randn(DIM, DIM, generator=gen, dtype=torch.float64) + 2 * torch.eye(DIM, dtype=torch.float64)
    x = torch.randn(BATCHES, TOKENS, DIM, generator=gen, dtype=torch.float64) @ mix + OFFSET
    return list(x.float())  # float32 batches, as the probe's tensors


def _correlation_error(a: torch.Tensor, ref: torch.Tensor) -> float:
    scale = ref.diagonal().sqrt()
    return float(((a - ref).abs() / (scale[:, None] * scale[None, :])).max())


def test_float32_scatter_matches_float64_within_the_rounding_bound(gen):
    batches = _batches(gen)
    low, high = Moments(DIM, dtype=torch.float32), Moments(DIM, dtype=torch.float64)
    naive = torch.zeros(DIM, DIM, dtype=torch.float32)
    for x in batches:
        low.update(x)
        high.update(x)
        naive += x.T @ x
    assert low.scatter_.dtype == torch.float32 and high.scatter_.dtype == torch.float64
    assert low.covariance_.dtype == torch.float64  # read-outs in float64
    bound = 3 * BATCHES * EPS32
    err = _correlation_error(low.covariance_, high.covariance_)
    assert 0 < err < bound  # > 0: the accumulator really rounds in float32
    mean = high.mean_.float()
    n = BATCHES * TOKENS
    uncentred = ((naive - n * torch.outer(mean, mean)) / (n - 1)).double()
    assert _correlation_error(uncentred, high.covariance_) > 100 * bound  # the control fails the same bound


def test_float32_cross_moments_give_the_float64_fit(gen):
    batches = _batches(gen)
    a = torch.randn(DIM, 3, generator=gen)
    low, high = CrossMoments(DIM, 3, torch.float32), CrossMoments(DIM, 3, torch.float64)
    for x in batches:
        y = (x - OFFSET) @ a + 0.5 * torch.randn(TOKENS, 3, generator=gen) + 100.0
        low.update(x, y)
        high.update(x, y)
    assert low.sxx_.dtype == low.sxy_.dtype == torch.float32
    bound = 3 * BATCHES * EPS32
    assert 0 < _correlation_error(low.sxx_.double(), high.sxx_) < bound
    w64, b64, _ = high.ridge(1e-3)
    w32, b32, _ = low.ridge(1e-3)
    # a relative perturbation e of the sums moves the solution by at most cond(S_xx) e, R^2 likewise
    cond = float(torch.linalg.cond(high.sxx_))
    r64, r32 = high.r_squared(w64, b64), low.r_squared(w32, b32)
    assert 0.5 < r64 < 1  # a fit with something to explain
    assert abs(r32 - r64) < cond * bound
    assert float((w32 - w64).abs().max() / w64.abs().max()) < cond * bound


@pytest.mark.parametrize("cls", [lambda d: Moments(4, dtype=d), lambda d: CrossMoments(4, 4, d)])
def test_other_accumulator_dtypes_are_refused(cls):
    with pytest.raises(ValueError, match=r"dtype of the statistics must be torch\.float64 or torch\.float32"):
        cls(torch.float16)
