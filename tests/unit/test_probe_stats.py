"""Streaming statistics of the probe against one-pass numpy/scipy on the concatenated data."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

from expattn.probes.hypotheses.base import (
    Batch,
    ProbeContext,
    kept_weights,
    massive,
    second_moments,
    shared,
    squared_norms,
)
from expattn.probes.hypotheses.e3_gaussianity import mean_pair_cosine
from expattn.probes.hypotheses.regression import CrossMoments
from expattn.probes.statistics.stats import BootstrapMeans, Moments, centre, cross, gram, poisson_weights


def _chunks(gen: torch.Generator, n: int, parts: int) -> list[int]:
    cuts = torch.randperm(n - 1, generator=gen)[: parts - 1].add(1).sort().values.tolist()
    return [b - a for a, b in zip([0, *cuts], [*cuts, n], strict=True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_moments_merge_equals_one_pass(gen, dtype):
    n, d, k = 3000, 7, 5
    # skewed, shifted, correlated data: exp of a correlated Gaussian plus an offset far from 0
    mix = 0.4 * torch.randn(d, d, generator=gen, dtype=torch.float64)
    x = (torch.randn(n, d, generator=gen, dtype=torch.float64) @ mix).exp()
    x = x + 50.0
    u = torch.randn(d, k, generator=gen, dtype=torch.float64)
    first, second = Moments(d, True, u), Moments(d, True, u)
    sizes = _chunks(gen, n, 9)
    start = 0
    for i, size in enumerate(sizes):
        (first if i % 2 else second).update(x[start : start + size].to(dtype))
        start += size
    merged = first.merge(second)
    ref = x.to(dtype).double().numpy()
    # float64: merge formulas are exact up to rounding (1e-10); float32 inputs: the centred float32
    # product per batch has relative error ~1e-6 of the scatter
    tol = 1e-10 if dtype == torch.float64 else 2e-5
    np.testing.assert_allclose(merged.mean_.numpy(), ref.mean(0), rtol=tol)
    np.testing.assert_allclose(
        merged.covariance_.numpy(), np.cov(ref, rowvar=False), rtol=tol, atol=tol * np.cov(ref, rowvar=False).max()
    )
    y = ref @ u.numpy()
    # projections are formed in the input dtype: float32 moves y by ~1e-7 relative, moments by ~1e-5
    mtol = 1e-9 if dtype == torch.float64 else 1e-4
    np.testing.assert_allclose(merged.skewness_().numpy(), scipy.stats.skew(y, axis=0), rtol=mtol, atol=mtol)
    np.testing.assert_allclose(merged.excess_kurtosis_().numpy(), scipy.stats.kurtosis(y, axis=0), rtol=mtol, atol=mtol)
    assert merged.n_ == n


def test_centre_recovers_the_float64_mean_of_float32_data(gen):
    n, d = 4096, 5
    x = (1000.0 + torch.randn(n, d, generator=gen, dtype=torch.float64)).float()  # offset 1000x the spread
    xc, mean, r = centre(x)
    ref = x.double()
    ref_mean = ref.mean(0)
    # the one-pass float32 mean is off by ~1e3 * 6e-8 per rounding; the residual pass is limited by the
    # float32 rounding of the centred values (~1e-7 of the unit spread): 1e-6 absolute separates the two
    naive_error = float((x.mean(0).double() - ref_mean).abs().max())
    np.testing.assert_allclose(mean.numpy(), ref_mean.numpy(), rtol=0, atol=1e-6)
    assert naive_error > 1e-6  # ~1e-4: the data tell the two apart
    scatter = (xc.T @ xc).double() - n * torch.outer(r, r)
    refc = ref - ref_mean
    # float32 products of unit-size centred values: ~1e-6 relative to the diagonal n
    np.testing.assert_allclose(scatter.numpy(), (refc.T @ refc).numpy(), rtol=0, atol=1e-5 * n)


def test_centre_reads_a_strided_view_with_several_token_axes(gen):
    h = (50.0 + torch.randn(6, 40, 7, generator=gen, dtype=torch.float64)).float()
    view = h[::2, 1:39]  # (3, 38, 7), not contiguous: summed one token axis at a time
    xc, mean, r = centre(view)
    ref = view.reshape(-1, 7).double()
    assert xc.shape == (3 * 38, 7)
    # float32 centring of values 50x their spread: the exact mean to ~1e-6, x_c to float32 rounding of 50
    np.testing.assert_allclose(mean.numpy(), ref.mean(0).numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(xc.double().numpy(), (ref - ref.mean(0) + r).numpy(), rtol=0, atol=1e-5)


def test_shared_computes_once_per_tensor_object():
    batch = Batch(torch.arange(2), torch.ones(2, 3))
    x = torch.arange(24.0).view(2, 3, 4)
    copy = x.clone()  # equal values, another object: must be computed again
    calls = []

    def total(t: torch.Tensor) -> torch.Tensor:
        calls.append(t)
        return t.sum()

    assert shared(batch, "sum", x, total) is shared(batch, "sum", x, total)
    assert len(calls) == 1
    assert float(shared(batch, "sum", copy, total)) == float(x.sum())
    assert float(shared(batch, "other", x, lambda t: t.max())) == 23.0
    assert len(calls) == 2


def test_moments_rejects_bad_input(gen):
    m = Moments(3)
    with pytest.raises(ValueError, match="shape"):
        m.update(torch.randn(4, 2, generator=gen))
    with pytest.raises(ValueError, match="NaN"):
        m.update(torch.tensor([[0.0, float("nan"), 1.0]]))
    with pytest.raises(ValueError, match="at least 2"):
        _ = Moments(3).covariance_


def test_cross_moments_ridge_and_heldout_r2(gen):
    n, dx, dy = 2000, 6, 4
    x = torch.randn(n, dx, generator=gen, dtype=torch.float64) * 3 + 1
    w_true = torch.randn(dx, dy, generator=gen, dtype=torch.float64)
    y = x @ w_true + 0.5 * torch.randn(n, dy, generator=gen, dtype=torch.float64) + 2
    train, test = CrossMoments(dx, dy), CrossMoments(dx, dy)
    for a, b in zip(range(0, n, 300), range(300, n + 300, 300), strict=True):
        (train if a < 1200 else test).update(x[a:b], y[a:b])
    w, b, lam = train.ridge(1e-3)
    # independent: ridge with intercept on centred training data by numpy lstsq on the augmented system
    xt, yt = x[:1200].numpy(), y[:1200].numpy()
    xc, yc = xt - xt.mean(0), yt - yt.mean(0)
    aug_x = np.vstack([xc, np.sqrt(lam) * np.eye(dx)])
    aug_y = np.vstack([yc, np.zeros((dx, dy))])
    w_ref = np.linalg.lstsq(aug_x, aug_y, rcond=None)[0]
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(b.numpy(), yt.mean(0) - xt.mean(0) @ w_ref, rtol=1e-9, atol=1e-10)
    xs, ys = x[1200:].numpy(), y[1200:].numpy()
    resid = ys - xs @ w.numpy() - b.numpy()
    r2_ref = 1 - (resid**2).sum() / ((ys - ys.mean(0)) ** 2).sum()
    assert test.r_squared(w, b) == pytest.approx(r2_ref, rel=1e-10)


def test_ridge_path_gcv_and_heldout_r2_per_block_against_explicit_residuals(gen):
    """GCV(lambda) = RSS/n / (1 - df/n)^2 of each column block, RSS from the fitted residuals themselves and df from
    the hat matrix's trace, and the held-out R^2 on a second sample from its residuals, all computed directly in
    numpy (independent of the eigenbasis shortcuts)."""
    n, dx = 400, 8
    x = torch.randn(2 * n, dx, generator=gen, dtype=torch.float64) * torch.linspace(0.2, 3, dx, dtype=torch.float64)
    x += 1
    y = torch.cat([x[:, :3] @ torch.randn(3, 2, generator=gen, dtype=torch.float64),
                   torch.randn(2 * n, 1, generator=gen, dtype=torch.float64)], 1)
    y += 0.3 * torch.randn(2 * n, 3, generator=gen, dtype=torch.float64)
    y[n:] += 0.5  # the held-out sample's means differ: the offset term counts
    stats, other = CrossMoments(dx, 3), CrossMoments(dx, 3)
    for a in range(0, 2 * n, 100):
        (stats if a < n else other).update(x[a:a + 100], y[a:a + 100])
    blocks, relatives = (slice(0, 2), slice(2, 3)), (1e-4, 1e-2, 1.0)
    xs, ys = x[:n].numpy(), y[:n].numpy()
    xc, yc = xs - xs.mean(0), ys - ys.mean(0)
    xo, yo = x[n:].numpy(), y[n:].numpy()
    path = stats.ridge_path(relatives)
    for block, held in zip(blocks, path.r_squared(other, blocks), strict=True):
        gcvs = path.gcv(block)
        for k, relative in enumerate(relatives):
            lam = float(path.lams[k])
            assert lam == pytest.approx(relative * (xc**2).sum(0).mean(), rel=1e-12)
            inverse = np.linalg.inv(xc.T @ xc + lam * np.eye(dx))
            w_ref = inverse @ xc.T @ yc[:, block]
            intercept = ys[:, block].mean(0) - xs.mean(0) @ w_ref
            w, b = path.weights(k, block)
            np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(b.numpy(), intercept, rtol=1e-9, atol=1e-12)
            rss = ((yc[:, block] - xc @ w_ref) ** 2).sum()
            df = 1 + np.trace(xc @ inverse @ xc.T)
            assert float(gcvs[k]) == pytest.approx(rss / n / (1 - df / n) ** 2, rel=1e-9)
            resid = yo[:, block] - xo @ w_ref - intercept
            r2 = 1 - (resid**2).sum() / ((yo[:, block] - yo[:, block].mean(0)) ** 2).sum()
            assert float(held[k]) == pytest.approx(r2, rel=1e-9, abs=1e-12)


def test_bootstrap_means_match_direct_weighted_means(gen):
    s, f, r = 40, 3, 50
    values = torch.randn(s, f, generator=gen, dtype=torch.float64) + 5
    index = torch.arange(s)
    weights = poisson_weights(7, index, r)
    assert torch.equal(weights, poisson_weights(7, index, r))  # seeded per sequence index
    assert torch.equal(weights[10:], poisson_weights(7, index[10:], r))  # independent of batching
    a, b = BootstrapMeans(f, r), BootstrapMeans(f, r)
    a.update(values[:13], weights[:13])
    b.update(values[13:], weights[13:])
    boot = a.merge(b)

    def ratio(m: torch.Tensor) -> torch.Tensor:
        return m[..., 0] / m[..., 1]

    est, lo, hi = boot.interval(ratio)
    direct = (weights.T @ values) / weights.sum(0)[:, None]
    reps = (direct[:, 0] / direct[:, 1]).numpy()
    assert est.item() == pytest.approx((values[:, 0].mean() / values[:, 1].mean()).item(), rel=1e-12)
    assert lo.item() == pytest.approx(np.quantile(reps, 0.025), rel=1e-12)
    assert hi.item() == pytest.approx(np.quantile(reps, 0.975), rel=1e-12)
    # the Poisson bootstrap standard error agrees with the delta-method one within its own noise (50 draws: ~20%)
    v = values.numpy()
    r_hat = v[:, 0].mean() / v[:, 1].mean()
    se_delta = np.std((v[:, 0] - r_hat * v[:, 1]) / v[:, 1].mean(), ddof=1) / np.sqrt(s)
    assert 0.5 < np.std(reps, ddof=1) / se_delta < 1.6


def test_weighted_spread_equals_the_spread_of_the_kept_tokens(gen):
    """Weights 0/1 must give exactly the spread and mean squared norm of the kept subset of each sequence
    (reference: numpy on the boolean-indexed tokens, float64; float32 inputs: relative 1e-5)."""
    x = torch.randn(3, 9, 5, generator=gen) * 3 + 1
    w = (torch.rand(3, 9, generator=gen) > 0.4).float()
    w[:, 0] = 1.0  # at least one token per sequence
    s, m = second_moments(x, w)
    for b in range(3):
        sub = x[b][w[b].bool()].double().numpy()
        ref_s = ((sub - sub.mean(0)) ** 2).sum(1).mean()
        np.testing.assert_allclose(s[b].item(), ref_s, rtol=1e-5)
        np.testing.assert_allclose(m[b].item(), (sub**2).sum(1).mean(), rtol=1e-5)
    full, _ = second_moments(x)
    np.testing.assert_allclose(second_moments(x, torch.ones(3, 9))[0].numpy(), full.numpy(), rtol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gram_matches_the_general_product(gen, dtype, threads):
    x = torch.randn(300, 40, generator=gen, dtype=dtype)[::2]  # a strided view: gram must not need contiguity
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # 1: numpy's syrk; 2: torch.mm
    try:
        got = gram(x)
    finally:
        torch.set_num_threads(before)
    ref = x.double().T @ x.double()
    assert got.dtype == dtype and got.shape == (40, 40)
    # float32 sums of 150 products of O(1) terms: relative error ~1e-6; float64 ~1e-15
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(got.double(), ref, rtol=tol, atol=tol * ref.abs().max().item())
    if threads == 1:  # syrk computes one triangle and mirrors it: exactly symmetric
        torch.testing.assert_close(got, got.T, rtol=0, atol=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_stacked_gram_and_cross_match_the_general_product(gen, threads):
    x = torch.randn(3, 60, 24, generator=gen)[:, ::2]  # (3, 30, 24) strided: one Gram matrix per leading index
    y = torch.randn(60, 16, generator=gen)[1::2]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)  # 1: numpy's BLAS; 2: torch
    try:
        stacked, product = gram(x), cross(x[0], y)
    finally:
        torch.set_num_threads(before)
    ref_stacked = torch.stack([a.double().T @ a.double() for a in x])
    ref_product = x[0].double().T @ y.double()
    assert stacked.shape == (3, 24, 24) and product.shape == (24, 16) and product.dtype == torch.float32
    # float32 sums of 30 products of O(1) terms: relative error ~1e-6
    torch.testing.assert_close(stacked.double(), ref_stacked, rtol=1e-5, atol=1e-5 * ref_stacked.abs().max().item())
    torch.testing.assert_close(product.double(), ref_product, rtol=1e-5, atol=1e-5 * ref_product.abs().max().item())


def test_mean_pair_cosine_equals_the_mean_over_explicit_pairs(gen):
    b, t, d = 3, 9, 6
    x = torch.randn(b, t, d, generator=gen) + 0.7  # a shared offset: cosines well away from 0
    w = (torch.rand(b, t, generator=gen) > 0.3).float()
    w[:, :2] = 1  # at least two used tokens per sequence
    got = mean_pair_cosine(x, torch.linalg.vector_norm(x, dim=-1), w)
    for i in range(b):
        used = x[i][w[i].bool()].double()
        cos = torch.nn.functional.cosine_similarity(used[:, None], used[None], dim=-1)
        n = len(used)
        ref = (cos.sum() - cos.diagonal().sum()) / (n * (n - 1))
        # float32 weighted sums of unit vectors, finished in float64: error ~1e-7
        assert got[i].item() == pytest.approx(ref.item(), rel=1e-5, abs=1e-6)


def test_shuffled_update_null_is_the_sum_of_spreads(gen):
    """E1's null: the mean spread of H + P Delta over every shuffle P of the used tokens equals
    spread(H) + spread(Delta), the closed form the estimator uses."""
    import itertools

    t, d = 6, 3
    h = torch.randn(1, t, d, generator=gen, dtype=torch.float64)
    delta = torch.randn(1, t, d, generator=gen, dtype=torch.float64) + h  # aligned with h: the null must remove it
    w = torch.tensor([[1.0, 1.0, 0.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    used = [i for i in range(t) if w[0, i] == 1]
    total, count = 0.0, 0
    for order in itertools.permutations(used):
        shuffled = delta.clone()
        shuffled[0, used] = delta[0, list(order)]
        total += second_moments(h + shuffled, w)[0].item()
        count += 1
    closed = second_moments(h, w)[0] + second_moments(delta, w)[0]
    assert total / count == pytest.approx(closed.item(), rel=1e-12)
    aligned = second_moments(h + delta, w)[0].item()
    assert aligned != pytest.approx(closed.item(), rel=1e-3)  # the aligned update differs


def test_massive_flags_only_the_outlier_tokens(gen):
    """Gaussian tokens: the largest of 2000 norms is ~1.3x the median, far below the factor 20; a token
    scaled by 100 is flagged, and one scaled by 10 is not."""
    x = torch.randn(4, 500, 16, generator=gen)
    assert not massive(squared_norms(x)).any()
    x[1, 7] *= 100
    x[2, 3] *= 10
    flags = massive(squared_norms(x))
    assert flags[1, 7] and flags.sum() == 1


def test_kept_weights_take_the_union_over_the_residual_stream_and_earlier_blocks():
    batch = Batch(torch.arange(2), torch.ones(2, 3))
    base = torch.ones(2, 6, 4)
    inp, out = base.clone(), base.clone()
    inp[0, 2] *= 100  # massive entering the block (kept index 1 after dropping position 0)
    out[1, 5] *= 100  # massive leaving it
    w = kept_weights(batch, {"input": inp, "output": out, "attn.residual": base}, slice(1, 6))
    expected = torch.ones(2, 5)
    expected[0, 1] = 0
    expected[1, 4] = 0
    assert torch.equal(w, expected)
    batch.shared.clear()  # the next block: nothing massive any more, the flags carry over
    later = kept_weights(batch, {"input": base.clone(), "output": base.clone()}, slice(1, 6))
    assert torch.equal(later, expected)


@pytest.mark.parametrize(
    ("name", "slug"),
    [("minilm", "minilm"), ("runs/ln/model", "ln-model"), ("/tmp/x/My Bert/", "my-bert"), ("model", "model")],
)
def test_plot_prefix_names_a_trained_run_by_its_folder(name, slug):
    ctx = ProbeContext.__new__(ProbeContext)
    object.__setattr__(ctx, "model_name", name)
    assert ctx.slug == slug


def test_layer_batches_hold_as_many_layers_as_the_transient_allows():
    from expattn.probes.statistics.batches import BATCH_BYTES, batches, per_batch

    accelerator = torch.device("meta")
    assert batches(7, BATCH_BYTES // 3, accelerator) == [range(0, 3), range(3, 6), range(6, 7)]
    assert batches(2, 1, accelerator) == [range(0, 2)]  # never more than the layers
    assert per_batch(5, 2 * BATCH_BYTES, accelerator) == 1  # one layer over the budget still runs, alone
    assert batches(3, 1, torch.device("cpu")) == [range(0, 1), range(1, 2), range(2, 3)]  # a CPU: layer at a time
    assert per_batch(3, 1) == 1  # no device: the memory estimates count the CPU's one layer
    with pytest.raises(ValueError, match="count and each must be positive"):
        per_batch(0, 10)
