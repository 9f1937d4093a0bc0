"""Every module on each available device, in float32 and half precision, against float64 on the CPU.

The device is a parameter: ``cpu`` always (so these code paths run in every CI), ``cuda`` when a GPU
is present (``pytest -q tests/cuda`` on a GPU machine). ``test_cuda_is_present`` is the one test
that needs the GPU itself and is skipped without one.

Tolerances are two-sided, relative to the reference's largest magnitude, from the unit roundoff
$u$ of the computing format (float32 $2^{-24}$, float16 $2^{-11}$, bfloat16 $2^{-8}$):

- above: ``HIGH`` = a few hundred $u$ for float32 (sums over at most 64 terms, softmax and a
  product: the error bound grows like $n u$), and 8-16 $u$ for half formats (inputs rounded once,
  $O(1)$ roundings on the path; reductions run in float32);
- below: ``LOW`` = $u/64$: an error smaller than that means the computation did not run in the
  format asked for (e.g. silently in float64).
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

from expattn.core import draws
from expattn.core.empirical import Empirical
from expattn.core.mixture import GaussianMixture
from expattn.dynamics.metrics import mardia, sliced_wasserstein_gaussian
from expattn.dynamics.operators import AttentionConfig, AttentionUpdate
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig, rotate_half_rope
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.hopfield_layers import HopfieldLayer, HopfieldPooling
from expattn.nn.implicit import ImplicitAttention, ImplicitConfig, InjectedAttention
from expattn.nn.lm import LM, LMConfig
from expattn.nn.norms import NormConfig, build_norm, norm_names
from expattn.probes.hypotheses.regression import CrossMoments
from expattn.probes.statistics.stats import BootstrapMeans, Moments, poisson_weights
from expattn.train.optim import adamw
from expattn.train.step import autocast, grad_scaler, optimizer_step

CUDA = torch.cuda.is_available()
DEVICES = ["cpu"] + (["cuda"] if CUDA else [])
HALF = [torch.bfloat16, torch.float16]
UNIT = {torch.float32: 2.0**-24, torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}
HIGH = {torch.float32: 512 * UNIT[torch.float32], torch.float16: 16 * UNIT[torch.float16],
        torch.bfloat16: 8 * UNIT[torch.bfloat16]}


def _close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, factor: float = 1.0) -> None:
    """``LOW <= max|out - ref| / max|ref| <= factor * HIGH`` (``ref`` float64 on the CPU)."""
    assert out.dtype == dtype, out.dtype
    assert torch.isfinite(out).all()
    err = ((out.detach().double().cpu() - ref).abs().max() / ref.abs().max()).item()
    assert UNIT[dtype] / 64 <= err <= factor * HIGH[dtype], (err, dtype)


def _on(x: torch.Tensor, device: str, dtype: torch.dtype) -> torch.Tensor:
    return x.to(device, dtype)


def test_cuda_is_present_when_expected():
    """On a GPU machine the CUDA parameter is in DEVICES (otherwise only the CPU runs, by design)."""
    assert ("cuda" in DEVICES) == CUDA


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
def test_cuda_generator_free_draws_stay_on_the_device():
    x = torch.zeros(3, device="cuda")
    assert draws.randn((4, 3), x).device.type == "cuda"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
def test_empirical_mean_and_log_normalizer(gen, device, dtype):
    keys, queries = torch.randn(2, 32, 16, generator=gen, dtype=torch.float64), torch.randn(2, 8, 16, generator=gen,
                                                                                           dtype=torch.float64)
    ref = Empirical(keys)
    dev = Empirical(_on(keys, device, dtype))
    _close(dev.mean(_on(queries, device, dtype)), ref.mean(queries), dtype)
    _close(dev.log_normalizer(_on(queries, device, dtype)), ref.log_normalizer(queries), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_fisher_and_mixture_in_float32(gen, device):
    keys, queries = torch.randn(2, 32, 8, generator=gen, dtype=torch.float64), torch.randn(2, 4, 8, generator=gen,
                                                                                          dtype=torch.float64)
    _close(Empirical(keys.to(device, torch.float32)).fisher(queries.to(device, torch.float32)),
           Empirical(keys).fisher(queries), torch.float32)
    cov = 0.3 * torch.eye(8, dtype=torch.float64).expand(2, 8, 8)
    mix, mix32 = GaussianMixture(keys, cov), GaussianMixture(keys.to(device, torch.float32), cov.to(device).float())
    _close(mix32.mean(queries.to(device, torch.float32)), mix.mean(queries), torch.float32)
    _close(mix32.log_normalizer(queries.to(device, torch.float32)), mix.log_normalizer(queries), torch.float32)
    g = torch.Generator().manual_seed(0)
    assert mix32.sample(queries.to(device, torch.float32), 3, generator=g).device.type == device


def _rope(tokens: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    freq = 1.0 / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = torch.arange(tokens, dtype=torch.float64)[:, None] * freq  # (T, D/2)
    angle = torch.cat((angle, angle), -1)[None]  # (1, T, D)
    return angle.cos(), angle.sin()


VARIANTS = {
    "plain": {}, "causal": {"is_causal": True}, "padding": {"padding": True}, "bias": {"bias": True},
    "gqa_rope": {"is_causal": True, "rope": True},
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("need_weights", [False, True])
def test_exp_fam_attention(gen, device, dtype, carrier, variant, need_weights):
    """Every carrier with no mask, the fused causal path, padding with a fully masked row (zero output, no
    NaN), an additive bias, and grouped KV heads with RoPE; fused (no weights) and explicit paths."""
    v = VARIANTS[variant]
    cfg = ExpFamAttentionConfig(embed_dim=32, num_heads=4, num_kv_heads=2 if v.get("rope") else None,
                                carrier=carrier, carrier_options={"init_variance": 0.05} if carrier != "empirical"
                                else {})
    torch.manual_seed(0)
    ref_mod = ExpFamAttention(cfg).double()
    mod = copy.deepcopy(ref_mod).to(device, dtype)
    x = torch.randn(2, 12, 32, generator=gen, dtype=torch.float64)
    kwargs: dict[str, object] = {"need_weights": need_weights}
    dev_kwargs: dict[str, object] = {"need_weights": need_weights}
    if v.get("is_causal"):
        kwargs["is_causal"] = dev_kwargs["is_causal"] = True
    if v.get("padding"):
        pad = torch.ones(2, 12, dtype=torch.bool)
        pad[1, 7:] = False
        kwargs["key_padding_mask"], dev_kwargs["key_padding_mask"] = pad, pad.to(device)
        kwargs["attn_mask"] = torch.ones(12, 12, dtype=torch.bool).tril()  # row 0 of batch 1 keeps key 0 only
        dev_kwargs["attn_mask"] = kwargs["attn_mask"].to(device)
    if v.get("bias"):
        bias = 0.5 * torch.randn(2, 1, 12, 12, generator=gen, dtype=torch.float64)
        kwargs["attn_mask"], dev_kwargs["attn_mask"] = bias, bias.to(device, dtype)
    if v.get("rope"):
        cos, sin = _rope(12, 8)
        kwargs["rotary"] = functools.partial(rotate_half_rope, cos=cos, sin=sin)
        dev_kwargs["rotary"] = functools.partial(rotate_half_rope, cos=_on(cos, device, dtype), sin=_on(sin, device,
                                                                                                          dtype))
    ref = ref_mod(x, **kwargs)
    out = mod(_on(x, device, dtype), **dev_kwargs)
    assert out.device.type == device
    _close(out, ref, dtype, factor=2.0)
    if need_weights:
        assert mod.last_weights.device.type == device
        assert torch.isfinite(mod.last_weights).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_backward(gen, device, dtype):
    """Gradients of the input through the fused kernel agree with float64 (backward of the flash path)."""
    torch.manual_seed(0)
    ref_mod = ExpFamAttention(ExpFamAttentionConfig(embed_dim=32, num_heads=4, causal=True)).double()
    mod = copy.deepcopy(ref_mod).to(device, dtype)
    x = torch.randn(2, 16, 32, generator=gen, dtype=torch.float64, requires_grad=True)
    xd = x.detach().to(device, dtype).requires_grad_(True)
    ref_mod(x).square().sum().backward()
    mod(xd).float().square().sum().backward()
    _close(xd.grad, x.grad, dtype, factor=4.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_hopfield_modules(gen, device, dtype):
    cfg = HopfieldConfig(input_size=16, beta=0.5, update_steps_max=2)
    state, stored = torch.randn(2, 3, 16, generator=gen, dtype=torch.float64), torch.randn(2, 20, 16, generator=gen,
                                                                                          dtype=torch.float64)
    hop = Hopfield(cfg)
    res, ref = hop.to(device, dtype).retrieve(_on(state, device, dtype), _on(stored, device, dtype)), \
        Hopfield(cfg).double().retrieve(state, stored)
    _close(res.output, ref.output, dtype, factor=2.0)
    assert res.energy.device.type == device and res.steps == 2
    torch.manual_seed(0)
    layer = HopfieldLayer(cfg, quantity=10).double()
    _close(copy.deepcopy(layer).to(device, dtype)(_on(state, device, dtype)), layer(state), dtype, factor=2.0)
    torch.manual_seed(0)
    pool = HopfieldPooling(cfg, num_queries=2).double()
    _close(copy.deepcopy(pool).to(device, dtype)(_on(stored, device, dtype)), pool(stored), dtype, factor=2.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, *HALF])
@pytest.mark.parametrize("name", norm_names())
def test_norms(gen, device, dtype, name):
    x = 1.0 + torch.randn(2, 40, 8, generator=gen, dtype=torch.float64)
    norm = build_norm(name, NormConfig(8))
    _close(norm.to(device)(_on(x, device, dtype)), norm.double().cpu()(x), dtype, factor=4.0 if name == "whitening"
           else 1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("solver", ["anderson", "broyden", "fixed_point_iter"])
def test_implicit_attention_float32(gen, device, solver):
    """Fixed points in float32 (a tolerance of 1e-5 is below half precision's resolution, so no half run):
    the device's solution and its input gradient match float64 to the solver tolerance."""
    torch.manual_seed(0)
    block = InjectedAttention(16, heads=2, gain=0.5, norm="layernorm").double()
    cfg = ImplicitConfig(solver=solver, tol=1e-6, max_iter=200, backward_tol=1e-6, backward_max_iter=200)
    ref_layer, layer = ImplicitAttention(block, cfg), ImplicitAttention(copy.deepcopy(block).to(device).float(), cfg)
    x = torch.randn(2, 6, 16, generator=gen, dtype=torch.float64, requires_grad=True)
    xd = x.detach().to(device, torch.float32).requires_grad_(True)
    z, stats = layer.forward_with_stats(xd)
    assert stats.forward.converged and z.device.type == device
    ref = ref_layer(x)
    _close(z, ref, torch.float32, factor=40.0)  # the solver stops at a relative residual of 1e-6 ~ 17 u / 0.5
    w = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (z * w.to(device, torch.float32)).sum().backward()
    (ref * w).sum().backward()
    _close(xd.grad, x.grad, torch.float32, factor=40.0)


@pytest.mark.parametrize("device", DEVICES)
def test_dynamics_operator_and_metrics(gen, device):
    x = torch.randn(2, 64, 4, generator=gen, dtype=torch.float64)
    for carrier, bandwidth in (("empirical", 0.0), ("gaussian_mixture", 0.5)):
        op = AttentionUpdate(AttentionConfig(carrier=carrier, bandwidth=bandwidth))
        _close(op(x.to(device).float()), op(x), torch.float32)
    ref, dev = mardia(x), mardia(x.to(device))
    for key in ref:
        assert dev[key].device.type == device
        torch.testing.assert_close(dev[key].cpu(), ref[key], rtol=1e-10, atol=1e-12)  # float64 both: rounding only
    sw_ref = sliced_wasserstein_gaussian(x, torch.Generator().manual_seed(1))
    sw_dev = sliced_wasserstein_gaussian(x.to(device), torch.Generator().manual_seed(1))  # same CPU draws
    for key in sw_ref:
        torch.testing.assert_close(sw_dev[key].cpu(), sw_ref[key], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_probe_statistics(gen, device, dtype):
    """The probe's streaming estimators fed device batches: float64 accumulators on the device, half inputs
    reduced in float32. The reference is the same estimator fed the same (rounded) values in float64 on the
    CPU, so only the accumulation differs: float32 centring of a half input -> float32 tolerance."""
    x = 3.0 + torch.randn(4, 50, 6, generator=gen, dtype=torch.float64)
    y = torch.randn(4, 50, 2, generator=gen, dtype=torch.float64)
    xr, yr = _on(x, "cpu", dtype).double(), _on(y, "cpu", dtype).double()  # the values the device sees
    dirs = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    ref, dev = Moments(6, directions=dirs), Moments(6, directions=dirs)
    crossed_ref, crossed = CrossMoments(6, 2), CrossMoments(6, 2)
    for i in range(4):
        ref.update(xr[i])
        dev.update(_on(x[i], device, dtype))
        crossed_ref.update(xr[i], yr[i])
        crossed.update(_on(x[i], device, dtype), _on(y[i], device, dtype))
    assert dev.mean_.device.type == device and dev.mean_.dtype == torch.float64
    for a, b in ((dev.mean_, ref.mean_), (dev.covariance_, ref.covariance_), (dev.excess_kurtosis_(),
                                                                               ref.excess_kurtosis_())):
        _close(a.float(), b, torch.float32)
    w, b, _ = crossed.ridge(1e-3)
    w_ref, b_ref, _ = crossed_ref.ridge(1e-3)
    _close(w.float(), w_ref, torch.float32, factor=8.0)
    _close(b.float(), b_ref, torch.float32, factor=8.0)
    boot, boot_ref = BootstrapMeans(6, 20), BootstrapMeans(6, 20)
    weights = poisson_weights(0, torch.arange(4), 20)
    boot.update(_on(x.mean(1), device, dtype), weights)
    boot_ref.update(_on(x.mean(1), "cpu", dtype).double(), weights)
    est, low, high = boot.interval(lambda m: m.sum(-1))
    assert est.device.type == device and low <= est <= high
    torch.testing.assert_close(est.cpu(), boot_ref.interval(lambda m: m.sum(-1))[0], rtol=1e-12, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_lm_mixed_precision_step(gen, device, dtype):
    """The LM under autocast on the device: logits in the half format within its resolution of the float64
    CPU logits (two-sided); one training step's loss (a float32 mean of 128 cross-entropies, whose rounding
    errors average out, so only bounded above) and parameters still float32 and finite."""
    cfg = LMConfig(vocab_size=13, context=16, layers=2, heads=2, dim=32)
    torch.manual_seed(0)
    ref_model = LM(cfg).double()
    model = copy.deepcopy(ref_model).to(device).float()
    x, y = torch.randint(0, 13, (2, 4, 16), generator=gen)
    ref_logits, ref = ref_model(x, y)
    half = torch.bfloat16 if dtype == "bfloat16" else torch.float16
    with autocast(torch.device(device), dtype):
        logits = model(x.to(device))[0]
    _close(logits, ref_logits, half, factor=4.0)
    loss = optimizer_step(model, model, adamw(model, 1e-3, 0.0, (0.9, 0.99)), x.to(device), y.to(device),
                          dtype=dtype, scaler=grad_scaler(torch.device(device), dtype), grad_clip=1.0)
    assert loss.device.type == device
    assert abs(loss.item() - ref.item()) <= 8 * UNIT[half] * ref.item()
    assert all(p.dtype == torch.float32 and p.device.type == device and torch.isfinite(p).all()
               for p in model.parameters())


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
def test_cuda_hot_paths_never_synchronise(gen, carrier):
    """Attention (causal, padded) forward and backward and a bfloat16 training step of the LM run with
    ``torch.cuda.set_sync_debug_mode("error")``: any read-back to the host (``.item()``, a tensor in an
    ``if``, a pageable copy) raises. Warm-up first (allocator and kernel caches may synchronise once)."""
    model = LM(LMConfig(vocab_size=13, context=16, layers=2, heads=2, dim=32, carrier=carrier)).cuda()
    opt = adamw(model, 1e-3, 0.0, (0.9, 0.99))
    attn = ExpFamAttention(ExpFamAttentionConfig(embed_dim=32, num_heads=4, num_kv_heads=2, carrier=carrier)).cuda()
    x, y = torch.randint(0, 13, (2, 4, 16), generator=gen)
    x, y = x.cuda(), y.cuda()
    h = torch.randn(2, 16, 32, generator=gen).cuda().requires_grad_(True)
    pad = torch.ones(2, 16, dtype=torch.bool, device="cuda")
    pad[1, 9:] = False

    def work() -> None:
        optimizer_step(model, model, opt, x, y, dtype="bfloat16", grad_clip=1.0)
        attn(h, key_padding_mask=pad).sum().backward()
        attn(h, is_causal=True, need_weights=True).sum().backward()

    work()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        work()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.skipif(not CUDA, reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_empirical_mean_never_synchronises(gen, dtype):
    """``Empirical(k).mean(q)`` forward and backward with ``set_sync_debug_mode("error")``: the overflow bound and
    the finiteness checks are asserted on the device; the result is SDPA's with scale 1 (the same kernel). That a
    NaN or an overflowing bound raises is tested on the CPU (``test_device_harness``): a device-side assert here
    would leave the process's CUDA context unusable for the tests after it."""
    q, k = (torch.randn(2, 3, 64, 16, generator=gen).to("cuda", dtype) for _ in range(2))
    qg = q.clone().requires_grad_(True)
    Empirical(k).mean(qg).sum().backward()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = Empirical(k).mean(qg)
        out.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.equal(out, torch.nn.functional.scaled_dot_product_attention(q, k, k, scale=1.0))
