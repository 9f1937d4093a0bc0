"""Modern Hopfield energy, update and layers (claims D1, D2) against independent computations."""

from __future__ import annotations

import math

import pytest
import torch

from expattn.core.hopfield import hopfield_energy, hopfield_update, hopfield_weights
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.hopfield_layers import HopfieldLayer, HopfieldPooling

F64 = torch.float64


def randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=F64)


def test_update_is_gradient_of_log_sum_exp_term(gen):
    xi, x = randn(gen, 3, 4, 6), randn(gen, 3, 9, 6)
    beta = torch.rand(3, 1, generator=gen, dtype=F64) + 0.2
    eta = xi.clone().requires_grad_(True)
    lse = torch.logsumexp(beta[..., None] * (eta @ x.mT), -1) / beta
    (grad,) = torch.autograd.grad(lse.sum(), eta)
    torch.testing.assert_close(hopfield_update(xi, x, beta), grad, rtol=0, atol=1e-12)  # float64 round-off
    energy = 0.5 * (xi * xi).sum(-1) - lse.detach()
    torch.testing.assert_close(hopfield_energy(xi, x, beta), energy, rtol=0, atol=1e-12)


@pytest.mark.parametrize("beta", [0.1, 1.0, 8.0])
def test_energy_never_increases_and_converges_to_fixed_point(gen, beta):
    """D1: CCCP never increases E; at convergence one more update changes nothing."""
    x = randn(gen, 4, 12, 5)
    xi = 3.0 * randn(gen, 4, 10, 5)
    energies = [hopfield_energy(xi, x, beta)]
    for _ in range(200):
        xi = hopfield_update(xi, x, beta)
        energies.append(hopfield_energy(xi, x, beta))
    steps = torch.stack(energies).diff(dim=0)
    # float64: an increase larger than 1e-12 relative to |E| cannot be round-off.
    assert steps.max().item() <= 1e-12 * max(1.0, torch.stack(energies).abs().max().item())
    assert steps.min().item() < -1e-3  # the energy did move
    again = hopfield_update(xi, x, beta)
    assert (again - xi).abs().max().item() < 1e-8


def test_separated_stored_pattern_is_a_fixed_point(gen):
    x = 4.0 * torch.linalg.qr(randn(gen, 6, 6)).Q[:4]  # orthogonal patterns of norm 4
    out = hopfield_update(x, x, beta=2.0)  # gap beta * 16 = 32: weights off the pattern ~ e^-32
    torch.testing.assert_close(out, x, rtol=0, atol=1e-12)


def test_retrieval_accuracy_of_noisy_binary_patterns_as_a_function_of_beta(gen):
    """D2: 20 stored +-1 patterns of dimension 64; queries with 16 of 64 bits flipped, one update.

    Overlap with the target is 64 - 2*16 = 32, with another pattern about N(0, 64) (sd 8), so the
    separation is about 16. beta = 0.01: logits differ by < 1, the output is near the mean of
    all patterns, its signs are the target's with probability ~0. beta = 1: off-target weights
    ~19 e^-16, the signs are exactly the target unless noise makes another pattern closer
    (P(N(0,64) >= 32) * 19 ~ 6e-4 per trial); the error falls like e^{-beta * separation}.
    """
    trials, n, d, flip = 300, 20, 64, 16
    x = torch.randint(0, 2, (trials, n, d), generator=gen).to(F64) * 2 - 1
    target = x[:, 0]
    signs = torch.ones(trials, d, dtype=F64)
    flips = torch.rand(trials, d, generator=gen).argsort(-1)[:, :flip]
    signs.scatter_(1, flips, -1.0)
    xi = (target * signs)[:, None]
    rate, error = {}, {}
    for beta in (0.01, 0.05, 0.5, 1.0):
        out = hopfield_update(xi, x, beta)[:, 0]
        rate[beta] = (out.sign() == target).all(-1).double().mean().item()
        error[beta] = (out - target).abs().amax(-1).median().item()
    assert rate[0.01] <= 0.05 and rate[0.05] <= 0.05
    assert rate[0.5] >= 0.95 and rate[1.0] >= 0.95
    assert error[0.01] > error[0.05] > error[0.5] > error[1.0]
    assert error[0.5] < 1e-2 and error[1.0] < 1e-4


def test_module_with_projections_and_heads_matches_manual_iteration(gen):
    cfg = HopfieldConfig(input_size=5, stored_pattern_size=7, pattern_projection_size=3, hidden_size=8,
                         value_size=4, output_size=6, num_heads=2, beta=(0.5, 2.0), update_steps_max=3, bias=True)
    hop = Hopfield(cfg).double()
    with torch.no_grad():
        for p in hop.parameters():
            p.copy_(randn(gen, *p.shape))
    r, y, p = randn(gen, 2, 3, 5), randn(gen, 2, 9, 7), randn(gen, 2, 9, 3)
    res = hop.retrieve(r, y, p)
    q, k, v = hop.state_proj(r), hop.stored_proj(y), hop.value_proj(p)
    outs = []
    for h, beta in enumerate((0.5, 2.0)):
        xi, kh, vh = q[..., 4 * h : 4 * h + 4], k[..., 4 * h : 4 * h + 4], v[..., 2 * h : 2 * h + 2]
        energy = [hopfield_energy(xi, kh, beta)]
        for _ in range(2):
            xi = hopfield_update(xi, kh, beta)
            energy.append(hopfield_energy(xi, kh, beta))
        outs.append(torch.softmax(beta * xi @ kh.mT, -1) @ vh)
        energy.append(hopfield_energy(hopfield_update(xi, kh, beta), kh, beta))
        torch.testing.assert_close(res.energy[:, :, h], torch.stack(energy), rtol=0, atol=1e-10)
    torch.testing.assert_close(res.output, hop.out_proj(torch.cat(outs, -1)), rtol=0, atol=1e-10)
    torch.testing.assert_close(hop(r, y, p), res.output, rtol=0, atol=1e-10)
    assert res.steps == 3 and res.energy.shape == (4, 2, 2, 3)


def test_defaults_retrieve_without_projection_and_until_converged(gen):
    hop = Hopfield(HopfieldConfig(input_size=4, update_steps_max=None, update_steps_eps=1e-10, beta=3.0)).double()
    assert not list(hop.parameters())
    y, r = randn(gen, 2, 6, 4), randn(gen, 2, 5, 4)
    res = hop.retrieve(r, y)
    assert res.converged and 1 < res.steps < 10_000
    torch.testing.assert_close(hopfield_update(res.output, y, 3.0), res.output, rtol=0, atol=1e-9)
    assert res.energy.diff(dim=0).max().item() <= 1e-12
    one = Hopfield(HopfieldConfig(input_size=4, beta=3.0)).double()
    torch.testing.assert_close(one(r, y), hopfield_update(r, y, 3.0), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("steps", [1, 3])
def test_forward_without_energy_equals_plain_update_and_retrieve_bitwise(gen, dtype, steps):
    """forward skips the log-normalizer; its output is bit for bit the plain update's and retrieve's."""
    y, r = randn(gen, 2, 40, 8).to(dtype), randn(gen, 2, 5, 8).to(dtype)
    hop = Hopfield(HopfieldConfig(input_size=8, beta=0.5, update_steps_max=steps))
    plain = r
    for _ in range(steps):  # the reference in plain torch (half precision reduced in float32)
        plain = torch.softmax((0.5 * plain @ y.mT).float(), dim=-1).to(dtype) @ y
    torch.testing.assert_close(hop(r, y), plain, rtol=0, atol=0)
    torch.testing.assert_close(hop(r, y), hop.retrieve(r, y).output, rtol=0, atol=0)
    keep = torch.tensor([[True] * 40, [True, False] * 20])
    masked = hop.retrieve(r, y, stored_padding_mask=keep)
    torch.testing.assert_close(hop(r, y, stored_padding_mask=keep), masked.output, rtol=0, atol=0)


def test_padding_mask_removes_stored_patterns(gen):
    hop = Hopfield(HopfieldConfig(input_size=4, update_steps_max=2)).double()
    y, r = randn(gen, 2, 6, 4), randn(gen, 2, 3, 4)
    keep = torch.tensor([[True] * 6, [True, True, False, True, False, True]])
    masked = hop(r, y, stored_padding_mask=keep)
    torch.testing.assert_close(masked[0], hop(r[:1], y[:1])[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(masked[1], hop(r[1:], y[1:, keep[1]])[0], rtol=0, atol=1e-12)


def test_layer_and_pooling_use_their_learned_patterns(gen):
    cfg = HopfieldConfig(input_size=4, update_steps_max=2, beta=1.5)
    layer = HopfieldLayer(cfg, quantity=7).double()
    r = randn(gen, 3, 5, 4)
    ref = hopfield_update(hopfield_update(r, layer.stored.expand(3, 7, 4), 1.5), layer.stored.expand(3, 7, 4), 1.5)
    torch.testing.assert_close(layer(r), ref, rtol=0, atol=1e-12)
    sep = HopfieldLayer(HopfieldConfig(input_size=4, pattern_projection_size=2), quantity=7, separate_values=True)
    assert sep.double()(r).shape == (3, 5, 2)
    pool = HopfieldPooling(HopfieldConfig(input_size=4, beta=0.7), num_queries=2).double()
    y = randn(gen, 3, 8, 4)
    torch.testing.assert_close(pool(y), hopfield_update(pool.queries.expand(3, 2, 4), y, 0.7), rtol=0, atol=1e-12)
    assert pool.retrieve(y).energy.shape == (2, 3, 1, 2)


def test_module_gradcheck_float64(gen):
    hop = Hopfield(HopfieldConfig(input_size=4, hidden_size=4, num_heads=2, update_steps_max=3, beta=0.8)).double()
    r = randn(gen, 1, 2, 4).requires_grad_(True)
    y = randn(gen, 1, 3, 4).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda r, y: hop(r, y), [r, y])
    assert torch.autograd.gradcheck(lambda r, y: hop.retrieve(r, y).energy, [r, y])


def test_bad_input_raises_naming_the_argument(gen):
    x = randn(gen, 5, 3)
    with pytest.raises(ValueError, match="beta"):
        hopfield_energy(x, x, beta=0.0)
    with pytest.raises(ValueError, match="beta"):
        hopfield_update(x, x, beta=torch.tensor([-1.0], dtype=F64))
    with pytest.raises(ValueError, match="xi has dimension 2, expected 3"):
        hopfield_update(x[:, :2], x)
    with pytest.raises(TypeError, match="mask must be a bool"):
        hopfield_update(x, x, mask=torch.ones(5))
    with pytest.raises(ValueError, match="mask has 4 entries"):
        hopfield_update(x, x, mask=torch.ones(4, dtype=torch.bool))
    with pytest.raises(ValueError, match="every stored pattern"):
        hopfield_update(x, x, mask=torch.zeros(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="num_heads=3 must divide"):
        HopfieldConfig(input_size=4, num_heads=3)
    with pytest.raises(ValueError, match="beta"):
        HopfieldConfig(input_size=4, beta=-2.0)
    with pytest.raises(ValueError, match="beta has 1 entries"):
        HopfieldConfig(input_size=4, num_heads=2, beta=(1.0,))
    with pytest.raises(ValueError, match="stored_pattern_size=5 must equal input_size=4"):
        HopfieldConfig(input_size=4, stored_pattern_size=5)
    with pytest.raises(ValueError, match="update_steps_max"):
        HopfieldConfig(input_size=4, update_steps_max=0)
    hop = Hopfield(HopfieldConfig(input_size=3)).double()
    with pytest.raises(ValueError, match="stored must have shape"):
        hop(randn(gen, 2, 4, 3), randn(gen, 2, 4, 2))
    with pytest.raises(TypeError, match="stored_padding_mask"):
        hop(randn(gen, 2, 4, 3), randn(gen, 2, 4, 3), stored_padding_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="stored_padding_mask must have shape"):
        hop(randn(gen, 2, 4, 3), randn(gen, 2, 4, 3), stored_padding_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="quantity"):
        HopfieldLayer(HopfieldConfig(input_size=3), quantity=0)


def test_energy_matches_printed_sign_only_when_corrected(gen):
    """004 prints E = 1/2 xi.xi logsumexp(X^T xi) with the minus lost; with a plus the update raises it."""
    x = randn(gen, 8, 4)
    xi = 0.01 * randn(gen, 3, 4)  # near the origin the update moves towards the patterns' mean
    printed = lambda z: 0.5 * (z * z).sum(-1) + torch.logsumexp(z @ x.T, -1)  # noqa: E731
    new = hopfield_update(xi, x)
    assert (printed(new) > printed(xi)).any()
    assert (hopfield_energy(new, x) <= hopfield_energy(xi, x) + 1e-12).all()
    assert math.isfinite(hopfield_energy(new, x).sum().item())


def test_verify_check_d1_passes_and_flags_the_printed_sign(tmp_path):
    from expattn.catalogue.registry import RunContext
    from expattn.checks.b1_d1 import check_d1

    record = check_d1(RunContext(seed=3, out_dir=tmp_path, quick=True))
    assert record.verdict == "pass" and record.as_printed == "fail"
    assert record.metrics["as_printed_error"] > 1e-3  # the printed "energy" rises by O(1) along updates
    assert (tmp_path / record.plots[0]).stat().st_size > 0


@pytest.mark.parametrize("where", ["state", "stored", "masked_stored", "pattern_projection"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("eps", [None, 1e-6])
def test_a_non_finite_input_is_named_although_only_the_output_is_checked(where, bad, eps):
    """The inputs are tested only when the output is not finite; every non-finite input must get there (also a
    masked stored pattern: 0 * inf is NaN) and be named, and an iteration to convergence stops at once."""
    gen = torch.Generator().manual_seed(3)
    state, stored = torch.randn(2, 5, 8, generator=gen), torch.randn(2, 7, 8, generator=gen)
    projection = torch.randn(2, 7, 8, generator=gen)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 6] = False
    target = {"state": state, "stored": stored, "masked_stored": stored, "pattern_projection": projection}[where]
    target[1, 6 if where == "masked_stored" else 2, 3] = bad
    layer = Hopfield(HopfieldConfig(input_size=8, update_steps_max=None if eps else 3, update_steps_eps=eps))
    name = "stored" if where == "masked_stored" else where
    with pytest.raises(ValueError, match=f"^{name} must be finite"):
        layer(state, stored, projection if where == "pattern_projection" else None, stored_padding_mask=keep)
    clean = {"nan": 0.0, "posinf": 1.0, "neginf": -1.0}  # the same inputs made finite: no error, a finite output
    result = layer.retrieve(state.nan_to_num(**clean), stored.nan_to_num(**clean), need_energy=False)
    assert torch.isfinite(result.output).all()


def test_weights_overwrite_the_logits_only_where_no_gradient_flows():
    logits = torch.randn(2, 3, 5, 7, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    expected = torch.softmax(logits, dim=-1)
    reused = logits.clone()
    with torch.no_grad():
        out = hopfield_weights(reused, reuse=True)
    assert out.data_ptr() == reused.data_ptr() and torch.equal(out, expected)  # the same numbers, in place
    tracked = logits.clone().requires_grad_(True)
    out = hopfield_weights(tracked, reuse=True)
    assert out.data_ptr() != tracked.data_ptr() and torch.equal(tracked.detach(), logits)  # autograd keeps them
    (grad,) = torch.autograd.grad(out[..., 0].sum(), tracked)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0
