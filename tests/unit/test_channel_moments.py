"""Per-channel central moments streamed in uneven batches and merged across halves equal a direct two-pass
computation on all the data at once; so does E3's largest channel kurtosis, merged across processes with
different shifts, and its bootstrap interval is that of one process holding all the data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from expattn.probes.hypotheses.e3_channels import ChannelKurtosis, channel_kurtosis
from expattn.probes.statistics.channels import ChannelMoments
from expattn.probes.statistics.stats import central_from_raw, poisson_weights


def direct(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Mean and excess kurtosis per channel, two-pass in float64 with numpy (independent of the code under test)."""
    a = x.double().numpy()
    c = a - a.mean(0)
    return a.mean(0), (c**4).mean(0) / (c**2).mean(0) ** 2 - 3


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_streamed_moments_equal_the_direct_computation(gen, offset):
    # heavy-tailed channels (Student t with 5 degrees of freedom, kurtosis ~6 at this n) far from 0 or near it,
    # scaled differently per channel; float32 data as the probe receives it
    n, d = 3_001, 7
    t = torch.randn(n, d, generator=gen, dtype=torch.float64) / (
        2 * torch._standard_gamma(torch.full((n, 1), 2.5, dtype=torch.float64), generator=gen) / 5).sqrt()
    x = (offset + t * torch.linspace(0.5, 3.0, d, dtype=torch.float64)).float()
    cuts = [0, 1, 2, 40, 41, 900, 2_500, n]  # uneven batches, two of one vector
    halves = [ChannelMoments(d), ChannelMoments(d)]
    for k, (a, b) in enumerate(itertools.pairwise(cuts)):
        halves[k % 2].update(x[a:b])
    merged = halves[0].merge(halves[1])
    mean, kurt = direct(x)
    assert merged.n_ == n
    # float64 sums of float32 inputs: the central sums are exact to ~1e-16 relative per term; after ~3,000 terms
    # and 8 merges the error stays below 1e-12 relative (1e-9 is ample and far below any kurtosis difference)
    np.testing.assert_allclose(merged.mean_.numpy(), mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(merged.excess_kurtosis_().numpy(), kurt, rtol=1e-9, atol=1e-9)
    # a single channel's raw moments turned central (the bootstrap's route) agree with the direct ones as well
    y = x.double() - x.double().mean(0)
    var, _, c4 = central_from_raw(*(y.pow(k).mean(0) for k in range(1, 5)))
    np.testing.assert_allclose((c4 / var**2 - 3).numpy(), kurt, rtol=1e-9, atol=1e-9)


def test_a_constant_channel_has_no_kurtosis_and_bad_input_is_refused(gen):
    x = torch.randn(50, 3, generator=gen)
    x[:, 1] = 2.5
    kurt = ChannelMoments(3).update(x[:20]).update(x[20:]).excess_kurtosis_()
    assert torch.isnan(kurt[1]) and torch.isfinite(kurt[[0, 2]]).all()
    with pytest.raises(ValueError, match="shape"):
        ChannelMoments(3).update(torch.randn(4, 2))
    with pytest.raises(ValueError, match="NaN"):
        ChannelMoments(3).update(torch.full((4, 3), float("nan")))
    with pytest.raises(ValueError, match="at least 2"):
        ChannelMoments(3).update(x[:1]).excess_kurtosis_()


def test_largest_channel_kurtosis_over_every_token_with_its_interval(gen):
    # two "ranks" of 12 sequences x 40 tokens in width 6, offset far from 0: channel 2 heavy-tailed (Student t
    # with 5 degrees of freedom), the others Gaussian; a few tokens left out (weight 0)
    seqs, t, d, reps = 24, 40, 6, 200
    x = 50 + torch.randn(seqs, t, d, generator=gen, dtype=torch.float64)
    chi2 = 2 * torch._standard_gamma(torch.full((seqs, t), 2.5, dtype=torch.float64), generator=gen)
    x[..., 2] = 50 + x[..., 2].sub(50) / (chi2 / 5).sqrt()
    x = x.float()
    w = torch.ones(seqs, t)
    w[:, :3] = 0
    boot = poisson_weights(0, torch.arange(seqs), reps)
    ranks = [ChannelKurtosis(1, d, reps), ChannelKurtosis(1, d, reps)]
    for r, rows in enumerate((slice(0, 5), slice(12, 20), slice(5, 12), slice(20, 24))):
        ranks[r // 2].update(0, x[rows], w[rows], boot[rows])  # rank 1 starts on other data: another shift
    assert not torch.equal(ranks[0].shift_[0], ranks[1].shift_[0])
    merged = ranks[0].merge(ranks[1])
    (est,), (low,), (high,) = merged.largest()
    kept = x[:, 3:].reshape(-1, d).double().numpy()
    c = kept - kept.mean(0)
    direct = np.abs((c**4).mean(0) / (c**2).mean(0) ** 2 - 3).max()
    # the streamed central moments against the direct two-pass value: float64 rounding only (see above)
    np.testing.assert_allclose(est, direct, rtol=1e-9)
    # the bootstrap's own estimate (its sums moved to one shift) is the same number through the raw moments
    # about a shift near the mean (cancellation ~1e-16 x (|mean - shift| / sd)^4, tiny)
    np.testing.assert_allclose(float(channel_kurtosis(merged.boot_[0].mean_()).max()), direct, rtol=1e-9)
    assert low < est < high and high - low > 0.1  # 888 tokens of a t5 channel: the kurtosis is uncertain
    # the same data on one rank gives the same interval (sums moved to the other shift exactly; 1e-9 relative)
    one = ChannelKurtosis(1, d, reps)
    one.update(0, x, w, boot)
    np.testing.assert_allclose(one.largest(), merged.largest(), rtol=1e-9)


def test_the_interval_is_the_chosen_channels_not_the_replicates_maximum(gen):
    # 96 Gaussian channels alike (as MiniLM's near-Gaussian ones): each bootstrap replicate's largest |kurtosis|
    # is its most inflated channel, so a percentile interval of the replicates' maximum lies above the estimate;
    # the chosen channel's interval must hold it
    seqs, t, d, reps = 32, 32, 96, 200
    x = torch.randn(seqs, t, d, generator=gen)
    kurt = ChannelKurtosis(1, d, reps)
    kurt.update(0, x, torch.ones(seqs, t), poisson_weights(0, torch.arange(seqs), reps))
    (est,), (low,), (high,) = kurt.largest()
    assert low < est < high
    _, low_max, _ = kurt.boot_[0].interval(lambda m: channel_kurtosis(m).amax(-1))
    assert low_max > est  # the biased interval this replaces: it misses its own estimate on this sample
