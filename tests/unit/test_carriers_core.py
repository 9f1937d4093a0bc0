"""One identity, two implementations: the nn carriers (fused, masked, grouped heads) equal the core measures
``Empirical`` and ``GaussianMixture`` in float64 on random inputs (claims A3, A6, A7).

With values = keys a carrier's output is $\\nabla G(\\beta q)$ of the measure whose atoms are the keys.
Tolerance: both sides are float64 sums of at most 9 terms of size O(1) (``|q|, |k| ~ 1``, ``beta <= 1``),
so they agree to ~1e-15; ``1e-12`` (relative and absolute) leaves a thousandfold margin and still
rejects any other formula: the negative controls below differ from the core by more than 1e-2.
"""

from __future__ import annotations

import pytest
import torch

from expattn.core.empirical import Empirical
from expattn.core.mixture import GaussianMixture
from expattn.nn.carriers import make_carrier

F64 = torch.float64
TOL = {"rtol": 1e-12, "atol": 1e-12}
B, H, HKV, Q, K, D = 2, 4, 2, 5, 9, 3


def _draw(gen):
    q = torch.randn(B, H, Q, D, generator=gen, dtype=F64)
    k = torch.randn(B, HKV, K, D, generator=gen, dtype=F64)
    return q, k, k.repeat_interleave(H // HKV, dim=1)  # head h reads kv head h // 2: (B, H, K, D)


def _keep(gen):
    """A per-query keep-mask ``(B, H, Q, K)`` with at least one key in every row."""
    keep = torch.rand(B, H, Q, K, generator=gen) > 0.4
    keep[..., 0] = True
    return keep


def _covariance(gen):
    a = torch.randn(H, D, D, generator=gen, dtype=F64)
    return a @ a.mT / D + 0.1 * torch.eye(D, dtype=F64)  # (H, D, D) positive definite


@pytest.mark.parametrize("need_stats", [True, False])
def test_empirical_carrier_is_the_empirical_measure(gen, need_stats):
    q, k, atoms = _draw(gen)
    keep, scale = _keep(gen), 0.7
    out = make_carrier("empirical", num_heads=H, head_dim=D)(q, k, k, keep, scale, need_stats)
    core = Empirical(atoms, mask=keep)  # per-query mask (B, H, Q, K)
    eta = scale * q
    torch.testing.assert_close(out.output, core.mean(eta), **TOL)
    if need_stats:
        torch.testing.assert_close(out.log_normalizer, core.log_normalizer(eta), **TOL)
        torch.testing.assert_close(out.weights, core.probs(eta), **TOL)
    # negative control: the keys without the mask are another measure
    assert (out.output - Empirical(atoms).mean(eta)).abs().max() > 1e-2


def test_empirical_carrier_causal_is_the_measure_on_earlier_keys(gen):
    q = torch.randn(B, H, K, D, generator=gen, dtype=F64)
    _, k, atoms = _draw(gen)
    tril = torch.ones(K, K, dtype=torch.bool).tril()
    core = Empirical(atoms, mask=tril.expand(B, H, K, K))
    carrier = make_carrier("empirical", num_heads=H, head_dim=D)
    for need_stats in (True, False):  # the explicit path and the fused kernel that skips the masked half
        out = carrier(q, k, k, None, 0.5, need_stats, causal=True)
        torch.testing.assert_close(out.output, core.mean(0.5 * q), **TOL)


@pytest.mark.parametrize("additive", [False, True])
@pytest.mark.parametrize("need_stats", [True, False])
def test_gaussian_mixture_carrier_is_the_gaussian_mixture_measure(gen, need_stats, additive):
    q, k, atoms = _draw(gen)
    sigma = _covariance(gen)
    carrier = make_carrier("gaussian_mixture", num_heads=H, head_dim=D).double()
    carrier.set_covariance(sigma)
    if additive:  # an additive mask is log pi: pi_n = e^{b_n}, not normalized
        bias = torch.randn(B, 1, 1, K, generator=gen, dtype=F64)
        mask, weights = bias, dict(log_weights=bias[:, :, 0])  # (B, 1, K)
    else:  # a key-padding keep-mask: pi_n = 1 on kept keys, 0 elsewhere
        keep = torch.rand(B, 1, 1, K, generator=gen) > 0.4
        keep[..., 0] = True
        mask, weights = keep, dict(weights=keep[:, :, 0].to(F64))
    scale = 0.6
    out = carrier(q, k, k, mask, scale, need_stats)
    core = GaussianMixture(atoms, sigma.expand(B, H, D, D), **weights)  # one shared Sigma_h per head
    eta = scale * q
    torch.testing.assert_close(out.output, core.mean(eta), **TOL)
    if need_stats:
        torch.testing.assert_close(out.log_normalizer, core.log_normalizer(eta), **TOL)
        torch.testing.assert_close(out.weights, core.responsibilities(eta), **TOL)
    # negative control: without Sigma eta the output is the empirical measure's, not the mixture's
    assert (out.output - Empirical(atoms).mean(eta)).abs().max() > 1e-2


@pytest.mark.parametrize("need_stats", [True, False])
def test_mixture_lower_bound_carrier_is_the_jensen_bound_of_the_measure(gen, need_stats):
    q, k, atoms = _draw(gen)
    sigma = _covariance(gen)
    carrier = make_carrier("mixture_lower_bound", num_heads=H, head_dim=D).double()
    carrier.set_covariance(sigma)
    bias = torch.randn(B, 1, 1, K, generator=gen, dtype=F64)
    scale = 0.6
    out = carrier(q, k, k, bias, scale, need_stats)
    # pi = softmax(b): log-weights that sum to one, so the bound has no log(total weight) term
    core = GaussianMixture(atoms, sigma.expand(B, H, D, D), log_weights=torch.log_softmax(bias[:, :, 0], -1))
    eta = scale * q
    torch.testing.assert_close(out.output, core.lower_bound_mean(eta), **TOL)
    if need_stats:
        torch.testing.assert_close(out.log_normalizer, core.lower_bound(eta), **TOL)
    # negative control: the bound's gradient is not the mixture's
    assert (out.output - core.mean(eta)).abs().max() > 1e-2
