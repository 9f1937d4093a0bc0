"""Carriers of ExpFamAttention against independent computations (claims A1, A3, A6, A7)."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import integrate, stats
from tiny_models import perturb

from expattn.nn.carriers import (
    Carrier,
    CarrierOutput,
    EmpiricalCarrier,
    carrier_names,
    make_carrier,
    register_carrier,
    softmax_attention,
    softmax_with_log_normalizer,
)

F64 = torch.float64
CARRIERS = ("empirical", "gaussian_mixture", "mixture_lower_bound")


def draw(gen, b=2, h=4, hkv=2, q=5, k=7, d=3):
    randn = lambda *s: torch.randn(*s, generator=gen, dtype=F64)  # noqa: E731
    return randn(b, h, q, d), randn(b, hkv, k, d), randn(b, hkv, k, d)


def random_psd(gen, h, d, rank=None):
    a = torch.randn(h, d, rank or d, generator=gen, dtype=F64)
    return a @ a.mT / d


def test_registry_names_and_errors():
    assert set(CARRIERS) <= set(carrier_names())
    with pytest.raises(ValueError, match=r"carrier must be one of .*empirical"):
        make_carrier("gaussian", num_heads=1, head_dim=2)
    with pytest.raises(ValueError, match="already registered"):
        register_carrier("empirical")(EmpiricalCarrier)
    with pytest.raises(TypeError, match="must declare uses_keys as a bool"):
        register_carrier("unused_name")(Carrier)
    with pytest.raises(TypeError, match="carrier_options for 'gaussian_mixture'"):
        make_carrier("gaussian_mixture", num_heads=1, head_dim=2, bogus=1)
    with pytest.raises(ValueError, match="num_heads"):
        make_carrier("empirical", num_heads=0, head_dim=2)


def test_softmax_attention_matches_explicit_formula_with_gqa_and_bias(gen):
    q, k, v = draw(gen)
    bias = torch.randn(2, 1, 5, 7, generator=gen, dtype=F64)
    out = softmax_attention(q, k, v, bias, 0.7, need_stats=True)
    fused = softmax_attention(q, k, v, bias, 0.7, need_stats=False)
    for head in range(4):
        kh, vh = k[:, head // 2], v[:, head // 2]  # head h reads kv head h // 2
        logits = 0.7 * q[:, head] @ kh.mT + bias[:, 0]
        w = logits.exp() / logits.exp().sum(-1, keepdim=True)
        # float64 round-off on O(1) numbers: 1e-12 is ~1e4 ulps, far below any real mismatch.
        torch.testing.assert_close(out.weights[:, head], w, rtol=0, atol=1e-12)
        torch.testing.assert_close(out.output[:, head], w @ vh, rtol=0, atol=1e-12)
        torch.testing.assert_close(out.log_normalizer[:, head], logits.exp().sum(-1).log(), rtol=0, atol=1e-12)
    torch.testing.assert_close(fused.output, out.output, rtol=0, atol=1e-12)


def test_empirical_output_is_gradient_of_log_normalizer_when_values_are_keys(gen):
    q, k, _ = draw(gen, hkv=4)
    carrier = make_carrier("empirical", num_heads=4, head_dim=3)
    eta = (0.5 * q).requires_grad_(True)
    g = torch.logsumexp(eta @ k.mT, -1)
    (grad,) = torch.autograd.grad(g.sum(), eta)
    out = carrier(q, k, k, None, 0.5, True)
    torch.testing.assert_close(out.output, grad, rtol=0, atol=1e-12)  # claim A3, float64 round-off
    torch.testing.assert_close(out.log_normalizer, g.detach(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["cholesky", "lowrank"])
def test_gaussian_mixture_is_gradient_of_its_log_normalizer(gen, kind):
    q, k, _ = draw(gen, hkv=4, d=4)
    options = {"covariance": kind, "rank": 2} if kind == "lowrank" else {}
    carrier = make_carrier("gaussian_mixture", num_heads=4, head_dim=4, init_variance=0.3, **options).double()
    perturb(carrier, gen, scale=0.3)
    sigma = carrier.covariance().detach()
    log_pi = torch.randn(2, 1, 1, 7, generator=gen, dtype=F64)
    eta = (0.8 * q).requires_grad_(True)
    g = 0.5 * (eta * (eta @ sigma)).sum(-1) + torch.logsumexp(log_pi + eta @ k.mT, -1)  # A6, Sigma symmetric
    (grad,) = torch.autograd.grad(g.sum(), eta)
    out = carrier(q, k, k, log_pi, 0.8, True)
    torch.testing.assert_close(out.output, grad, rtol=0, atol=1e-11)  # float64 round-off
    torch.testing.assert_close(out.log_normalizer, g.detach(), rtol=0, atol=1e-11)
    torch.testing.assert_close(carrier(q, k, k, log_pi, 0.8, False).output, out.output, rtol=0, atol=1e-12)


def test_gaussian_mixture_log_normalizer_matches_quadrature(gen):
    """One dimension: G(eta) = log of the integral of sum_n pi_n N(x; k_n, s^2) e^{x eta} dx (A6)."""
    carrier = make_carrier("gaussian_mixture", num_heads=1, head_dim=1).double()
    s2 = 0.2 + torch.rand((), generator=gen, dtype=F64).item()
    carrier.set_covariance(torch.full((1, 1, 1), s2, dtype=F64))
    k = torch.randn(1, 1, 4, 1, generator=gen, dtype=F64)
    pi = torch.rand(4, generator=gen, dtype=F64) + 0.1
    q = torch.randn(1, 1, 3, 1, generator=gen, dtype=F64)
    out = carrier(q, k, k, pi.log().view(1, 1, 1, 4), 1.0, True)
    for i in range(3):
        eta = q[0, 0, i, 0].item()
        pairs = list(zip(pi.tolist(), k.flatten().tolist(), strict=True))
        h = lambda x, e=eta: sum(p * stats.norm.pdf(x, m, math.sqrt(s2)) * math.exp(x * e) for p, m in pairs)  # noqa: E731, B023
        value, err = integrate.quad(h, -30, 30, epsabs=1e-13, epsrel=1e-12)
        # quad reports its own error estimate (~1e-12 relative); 1e-9 leaves margin on the log.
        assert abs(out.log_normalizer[0, 0, i].item() - math.log(value)) < 1e-9 + err / value


def test_mixture_lower_bound_gradient_and_jensen_gap(gen):
    q, k, _ = draw(gen, hkv=4, d=3)
    lb = make_carrier("mixture_lower_bound", num_heads=4, head_dim=3).double()
    gm = make_carrier("gaussian_mixture", num_heads=4, head_dim=3).double()
    sigma = random_psd(gen, 4, 3)
    lb.set_covariance(sigma)
    gm.set_covariance(sigma)
    bias = torch.randn(2, 1, 5, 7, generator=gen, dtype=F64)
    pi = torch.softmax(bias, -1)  # the mixture weights sum to one
    eta = (0.6 * q).requires_grad_(True)
    g_lb = 0.5 * (eta * (eta @ sigma)).sum(-1) + (pi * (eta @ k.mT)).sum(-1)  # A7
    (grad,) = torch.autograd.grad(g_lb.sum(), eta)
    out = lb(q, k, k, bias, 0.6, True)
    torch.testing.assert_close(out.output, grad, rtol=0, atol=1e-12)  # float64 round-off
    torch.testing.assert_close(out.log_normalizer, g_lb.detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(out.weights, pi.expand(2, 4, 5, 7), rtol=0, atol=1e-15)
    # Jensen: G_LB <= G with the same normalized weights; the gap is strictly positive here.
    g = gm(q, k, k, torch.log_softmax(bias, -1), 0.6, True).log_normalizer
    gap = g - out.log_normalizer
    assert gap.min().item() > 0


@pytest.mark.parametrize("name", CARRIERS)
def test_fully_masked_rows_give_zero_output_and_minus_inf(gen, name):
    q, k, v = draw(gen, hkv=4, d=3)
    carrier = make_carrier(name, num_heads=4, head_dim=3, **({} if name == "empirical" else {"init_variance": 0.5}))
    carrier = carrier.double()
    mask = torch.rand(2, 1, 5, 7, generator=gen) > 0.3
    mask[:, :, 0] = True
    mask[1, :, 2] = False  # query 2 of batch element 1 sees nothing
    for need in (True, False):
        qq = q.clone().requires_grad_(True)
        out = carrier(qq, k, v, mask, 0.5, need)
        assert torch.isfinite(out.output).all()
        assert (out.output[1, :, 2] == 0).all()
        out.output.sum().backward()
        assert torch.isfinite(qq.grad).all() and (qq.grad[1, :, 2] == 0).all()
        if need:
            assert torch.isneginf(out.log_normalizer[1, :, 2]).all()
            assert torch.isfinite(out.log_normalizer[0]).all()
            assert (out.weights[1, :, 2] == 0).all()
            torch.testing.assert_close(out.weights[0].sum(-1), torch.ones(4, 5, dtype=F64), rtol=0, atol=1e-12)
    float_mask = torch.zeros(mask.shape, dtype=F64).masked_fill(~mask, -torch.inf)
    torch.testing.assert_close(carrier(q, k, v, float_mask, 0.5, True).output, carrier(q, k, v, mask, 0.5, True).output)


@pytest.mark.parametrize("name", CARRIERS)
def test_gradcheck_float64(gen, name):
    q, k, v = draw(gen, b=1, h=2, hkv=1, q=3, k=4, d=2)
    carrier = make_carrier(name, num_heads=2, head_dim=2, **({} if name == "empirical" else {"init_variance": 0.5}))
    carrier = carrier.double()
    mask = torch.tensor([True, True, False, True]).view(1, 1, 1, 4)
    names = [n for n, _ in carrier.named_parameters()]
    params = [p.detach().clone().requires_grad_(True) for p in carrier.parameters()]
    inputs = [t.requires_grad_(True) for t in (q, k, v)]
    for need in (False, True):

        def fn(q, k, v, *ps, need=need):
            out = torch.func.functional_call(carrier, dict(zip(names, ps, strict=True)), (q, k, v, mask, 0.9, need))
            return out.output if not need else (out.output, out.log_normalizer)

        assert torch.autograd.gradcheck(fn, [*inputs, *params], fast_mode=True)


def test_covariance_parametrisations_are_psd_and_set_exactly(gen):
    lowrank = make_carrier("gaussian_mixture", num_heads=3, head_dim=5, covariance="lowrank", rank=2).double()
    sigma = lowrank.covariance().detach()
    assert torch.linalg.eigvalsh(sigma).min().item() > -1e-12
    eta = torch.randn(2, 3, 4, 5, generator=gen, dtype=F64)
    torch.testing.assert_close(lowrank.apply_covariance(eta), eta @ sigma, rtol=0, atol=1e-12)
    chol = make_carrier("gaussian_mixture", num_heads=3, head_dim=5).double()
    target = random_psd(gen, 3, 5, rank=2)  # singular: semi-definite is allowed
    chol.set_covariance(target)
    torch.testing.assert_close(chol.covariance().detach(), target, rtol=0, atol=1e-12)


def test_bad_covariances_and_options_raise(gen):
    carrier = make_carrier("gaussian_mixture", num_heads=2, head_dim=3).double()
    sigma = random_psd(gen, 2, 3)
    sigma[0] -= 5 * torch.eye(3, dtype=F64)
    with pytest.raises(ValueError, match="positive semi-definite"):
        carrier.set_covariance(sigma)
    with pytest.raises(ValueError, match="symmetric"):
        carrier.set_covariance(torch.randn(2, 3, 3, generator=gen, dtype=F64) + 5 * torch.eye(3, dtype=F64))
    with pytest.raises(ValueError, match="shape"):
        carrier.set_covariance(torch.eye(3, dtype=F64))
    with pytest.raises(TypeError, match="sigma"):
        carrier.set_covariance(torch.eye(3, dtype=torch.int64).expand(2, 3, 3))
    with pytest.raises(ValueError, match="covariance must be"):
        make_carrier("gaussian_mixture", num_heads=2, head_dim=3, covariance="full")
    with pytest.raises(ValueError, match="rank"):
        make_carrier("gaussian_mixture", num_heads=2, head_dim=3, covariance="lowrank", rank=4)
    with pytest.raises(ValueError, match="init_variance"):
        make_carrier("mixture_lower_bound", num_heads=2, head_dim=3, init_variance=-1.0)
    q, k, v = draw(gen, d=3)
    with pytest.raises(ValueError, match="value head size"):
        carrier(q[:, :2], k, v[..., :2], None, 1.0, False)


def test_carrier_output_is_a_named_tuple(gen):
    q, k, v = draw(gen)
    out = softmax_attention(q, k, v, None, 1.0, False)
    assert isinstance(out, CarrierOutput) and out.weights is None and out.log_normalizer is None


def test_softmax_with_log_normalizer_matches_logsumexp_and_its_gradient(gen):
    logits = 30.0 * torch.randn(6, 40, generator=gen, dtype=F64)
    logits[0, 3] = -torch.inf  # a masked entry
    x = logits.clone().requires_grad_(True)
    weights, log_z = softmax_with_log_normalizer(x)
    torch.testing.assert_close(log_z, torch.logsumexp(logits, -1), rtol=0, atol=1e-12)  # float64 round-off
    torch.testing.assert_close(weights, torch.softmax(logits, -1), rtol=0, atol=1e-15)
    (grad,) = torch.autograd.grad(log_z.sum(), x)
    torch.testing.assert_close(grad, weights.detach(), rtol=0, atol=1e-12)  # d lse / d l = softmax
    big = (1e4 * torch.randn(3, 50, generator=gen)).float()  # no overflow in float32 at logits ~1e4
    _, lz32 = softmax_with_log_normalizer(big)
    # float32 relative precision ~6e-8 on values ~1e4: 1e-2 absolute is ~20 ulps.
    torch.testing.assert_close(lz32.double(), torch.logsumexp(big.double(), -1), rtol=0, atol=1e-2)
    w16, lz16 = softmax_with_log_normalizer(big[:, :8].bfloat16())
    assert w16.dtype == torch.bfloat16 and torch.isfinite(lz16).all()
