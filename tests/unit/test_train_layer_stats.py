"""E1-E3 measurements of a trained LM against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from expattn.nn.lm import LM, LMConfig
from expattn.train.data import CharCorpus
from expattn.train.layer_stats import effective_rank_ratio, layer_dynamics, projected_excess_kurtosis


def test_kurtosis_of_a_gaussian_cloud_is_within_its_standard_error(gen):
    n, d, k = 20000, 6, 32
    cov_root = torch.randn(d, d, generator=gen, dtype=torch.float64)
    x = torch.randn(n, d, generator=gen, dtype=torch.float64) @ cov_root  # correlated Gaussian
    value = projected_excess_kurtosis(x, k, gen)
    # |kappa| of one direction has mean ~ sqrt(2/pi) * sqrt(24/n) under the null; allow 4x that
    assert 0 <= value < 4 * np.sqrt(2 / np.pi) * np.sqrt(24 / n)


def test_kurtosis_matches_scipy_along_one_direction(gen):
    x = torch.distributions.Laplace(0.0, 1.0).sample((5000, 1)).double() * 3.0 + 1.0
    value = projected_excess_kurtosis(x, 1, gen)  # in 1-D every unit direction is +-1
    expected = abs(stats.kurtosis(x[:, 0].numpy(), fisher=True, bias=True))
    assert value == pytest.approx(expected, rel=1e-9)  # same estimator, float64 rounding only


def test_effective_rank_ratio(gen):
    x = torch.randn(5000, 8, generator=gen, dtype=torch.float64)
    evals = np.linalg.eigvalsh(np.cov(x.numpy().T, bias=True))
    p = evals / evals.sum()
    assert effective_rank_ratio(x) == pytest.approx(np.exp(-(p * np.log(p)).sum()) / 8, rel=1e-9)
    flat = x.clone()
    flat[:, 4:] = 0.0
    assert effective_rank_ratio(flat) <= 0.5 + 1e-12


def test_layer_dynamics_ratios_are_spread_ratios_of_the_traced_states(gen, tmp_path):
    text = "".join("abcdefgh \n"[i] for i in torch.randint(0, 10, (3000,), generator=gen).tolist())
    (tmp_path / "t.txt").write_text(text)
    corpus = CharCorpus.load(tmp_path / "t.txt")
    torch.manual_seed(0)
    model = LM(LMConfig(vocab_size=corpus.vocab_size, context=16, layers=2, heads=2, dim=8))
    rows = layer_dynamics(model, corpus, sequences=8, seed=3, directions=8)
    x, _ = corpus.batch("val", 8, 16, torch.Generator().manual_seed(3))
    trace = {}
    model.eval()
    with torch.no_grad():
        model(x, trace=trace)
    for row in rows:
        before = trace[f"layers.{row['layer']}.attn.input"].double().numpy()
        after = trace[f"layers.{row['layer']}.attn.output"].double().numpy()
        spread = lambda c: np.sqrt(np.trace(np.cov(c.T, bias=True)))  # noqa: E731
        ratios = [spread(a) / spread(b) for a, b in zip(after, before, strict=True)]
        # float32 states, float64 statistics: agreement to float32 rounding of the states
        assert row["e1_spread_ratio"] == pytest.approx(np.exp(np.mean(np.log(ratios))), rel=1e-5)
        assert row["e2_spread_ratio_scaled"] > 0 and 0 < row["e3_effective_rank_ratio"] <= 1
    with pytest.raises(ValueError, match="sequences"):
        layer_dynamics(model, corpus, sequences=1)
