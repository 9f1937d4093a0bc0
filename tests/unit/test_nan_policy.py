"""The NaN policy: non-finite inputs and overflowing logits raise by default, a global switch turns the
checks off, half precision factorises in float32, and empty inputs give empty outputs or a clear error."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_models import tiny_lm

from expattn.core.hopfield import hopfield_update
from expattn.core.mixture import GaussianMixture
from expattn.core.solvers import solve
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.norms import NormConfig, build_norm, norm_names
from expattn.validation import set_validate, validate_enabled, validating

BAD = st.sampled_from([float("nan"), float("inf"), float("-inf")])


def _modules():
    torch.manual_seed(0)
    yield "attention", ExpFamAttention(ExpFamAttentionConfig(embed_dim=8, num_heads=2)), lambda m, x: m(x)
    yield "hopfield", Hopfield(HopfieldConfig(input_size=8)), lambda m, x: m(x, x.detach().clone())
    for name in norm_names():
        yield name, build_norm(name, NormConfig(dim=8, radius=2.0)), lambda m, x: m(x)


MODULES = list(_modules())


@pytest.mark.parametrize(("name", "module", "call"), MODULES, ids=[m[0] for m in MODULES])
@settings(max_examples=25, deadline=None)
@given(position=st.integers(0, 2 * 20 * 8 - 1), bad=BAD, seed=st.integers(0, 2**31 - 1))
def test_non_finite_input_raises_naming_it(name, module, call, position, bad, seed):
    x = torch.randn(2, 20, 8, generator=torch.Generator().manual_seed(seed))
    x.view(-1)[position] = bad
    with pytest.raises(ValueError, match=r"(x|query|state) must be finite"):
        call(module, x)


OVERFLOWING = [m for m in MODULES if m[0] in ("attention", "hopfield", "layernorm", "whitening")]


@pytest.mark.parametrize(("name", "module", "call"), OVERFLOWING, ids=[m[0] for m in OVERFLOWING])
def test_logits_overflowing_float32_raise_instead_of_nan(name, module, call):
    """Inputs of size 1e20 are finite, but their products (1e40) exceed float32's 3.4e38."""
    x = torch.randn(2, 20, 8, generator=torch.Generator().manual_seed(1)) * 1e20
    with pytest.raises(ValueError, match=r"not finite although its inputs are|overflows"):
        call(module, x)


def test_beta_near_the_float_range_raises():
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(2))
    with pytest.raises(ValueError, match="overflow"):
        Hopfield(HopfieldConfig(input_size=8, beta=1e38))(x, x)
    with pytest.raises(ValueError, match="overflow"):
        hopfield_update(x, x, beta=1e38)


def test_switch_off_globally_locally_and_per_module():
    attention = ExpFamAttention(ExpFamAttentionConfig(embed_dim=8, num_heads=2))
    x = torch.full((1, 3, 8), float("nan"))
    assert validate_enabled()
    with validating(False):
        assert not validate_enabled()
        assert torch.isnan(attention(x)).all()  # unchecked: NaN in, NaN out (the caller asked for it)
        attention.validate_args = True  # an instance's own setting wins over the global one
        with pytest.raises(ValueError, match="query must be finite"):
            attention(x)
    assert validate_enabled()
    attention.validate_args = False
    assert torch.isnan(attention(x)).all()
    set_validate(False)
    try:
        assert not validate_enabled()
    finally:
        set_validate(True)
    with pytest.raises(TypeError, match="enabled must be a bool"):
        set_validate(0)


def test_lm_attention_skips_the_per_layer_sync():
    """The LM's trainer checks its loss every step; its attention layers opt out of the per-call checks."""
    lm = tiny_lm(vocab_size=5, layers=1, context=4)
    assert all(b.attn.validate_args is False for b in lm.blocks)


@pytest.mark.parametrize("name", norm_names())
def test_contraction_of_an_empty_cloud_is_an_error(name):
    with pytest.raises(ValueError, match="no tokens"):
        build_norm(name, NormConfig(dim=4, radius=2.0)).contraction(torch.randn(3, 0, 4))


def test_empty_inputs():
    attention = ExpFamAttention(ExpFamAttentionConfig(embed_dim=8, num_heads=2))
    assert attention(torch.randn(0, 5, 8)).shape == (0, 5, 8)
    assert attention(torch.randn(2, 0, 8)).shape == (2, 0, 8)
    for carrier in ("empirical", "mixture_lower_bound"):  # no keys: the empty carrier, output zero (no NaN)
        module = ExpFamAttention(ExpFamAttentionConfig(embed_dim=8, num_heads=2, carrier=carrier, bias=False))
        out = module(torch.randn(2, 5, 8), torch.randn(2, 0, 8), torch.randn(2, 0, 8))
        assert torch.equal(out, torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match="at least one stored pattern"):
        Hopfield(HopfieldConfig(input_size=8))(torch.randn(2, 5, 8), torch.randn(2, 0, 8))
    assert Hopfield(HopfieldConfig(input_size=8))(torch.randn(0, 5, 8), torch.randn(0, 5, 8)).shape == (0, 5, 8)
    with pytest.raises(ValueError, match="at least one component"):
        GaussianMixture(torch.randn(0, 4), torch.eye(4))
    with pytest.raises(ValueError, match="whitening needs more tokens"):
        build_norm("whitening", NormConfig(dim=4, ridge=1e-3))(torch.randn(2, 0, 4))


# Half precision keeps 8 (bfloat16) or 11 (float16) significant bits: relative rounding 2^-8 = 3.9e-3
# per operation; a handful of roundings on O(1) values stays well under 0.05, while a wrong formula
# (or one computed on the wrong axis) is off by O(1).
HALF_TOL = 0.05


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gaussian_mixture_in_half_precision_matches_float64(dtype):
    gen = torch.Generator().manual_seed(3)
    means, eta, x = (torch.randn(*s, generator=gen).to(dtype) for s in ((6, 3), (4, 3), (4, 3)))
    cov = (0.5 * torch.eye(3)).to(dtype)
    half = GaussianMixture(means, cov)
    exact = GaussianMixture(means.double(), cov.double())
    for method, args in (("log_normalizer", (eta,)), ("mean", (eta,)), ("log_prob", (x, eta))):
        got = getattr(half, method)(*args)
        want = getattr(exact, method)(*(a.double() for a in args))
        assert got.dtype == dtype
        torch.testing.assert_close(got.double(), want, atol=HALF_TOL, rtol=HALF_TOL)
    assert half.sample(eta, 5, generator=gen).dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_whitening_in_half_precision(dtype):
    x = (torch.randn(2, 64, 4, generator=torch.Generator().manual_seed(4)) * 3 + 1).to(dtype)
    y = build_norm("whitening", NormConfig(dim=4))(x)
    assert y.dtype == dtype
    centred = y.double() - y.double().mean(-2, keepdim=True)
    cov = centred.mT @ centred / 64
    torch.testing.assert_close(cov, torch.eye(4, dtype=torch.float64).expand(2, 4, 4), atol=HALF_TOL, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_anderson_in_half_precision(dtype):
    """z = z/2 + 1 has the fixed point z = 2."""
    z, stats = solve(lambda z: 0.5 * z + 1, torch.zeros(2, 4, dtype=dtype), method="anderson", tol=1e-2, max_iter=50)
    assert z.dtype == dtype and stats.converged
    torch.testing.assert_close(z.double(), torch.full((2, 4), 2.0, dtype=torch.float64), atol=HALF_TOL, rtol=0)


def test_output_check_fast_path_keeps_large_finite_values_and_finds_every_bad_entry():
    """check_output sums first: a finite sum passes at once; a sum that overflows although every entry is
    finite must still pass (element-wise fallback); one NaN or infinity anywhere must raise."""
    from expattn.core.validate import check_output

    big = torch.full((4, 3), 3e38, dtype=torch.float32)  # the sum overflows to inf, each entry is finite
    assert check_output("y", big, "cause") is big
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = torch.randn(5, 7)
        y[3, 4] = bad
        with pytest.raises(ValueError, match="y is not finite although its inputs are: cause"):
            check_output("y", y, "cause")


@pytest.mark.parametrize("norm", norm_names())
def test_model_on_the_meta_device_builds(norm):
    """Counting parameters builds the LM on the ``meta`` device (no values): the finite checks let it pass."""
    with torch.device("meta"):
        params = sum(p.numel() for p in tiny_lm(norm=norm, layers=1).parameters())
    assert params == sum(p.numel() for p in tiny_lm(norm=norm, layers=1).parameters())


@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
@pytest.mark.parametrize(
    ("parameter", "bad"),
    [("out_proj.weight", float("nan")), ("out_proj.bias", -float("inf")), ("in_proj_weight", float("inf")),
     ("in_proj_bias", float("nan"))],
)
def test_non_finite_parameter_is_named_not_the_inputs(carrier, parameter, bad):
    """The output check diagnoses the module's parameters when the output is not finite (the inputs are checked
    first and are finite here), instead of passing a NaN weight or blaming an overflow of the inputs."""
    torch.manual_seed(0)
    module = ExpFamAttention(ExpFamAttentionConfig(embed_dim=8, num_heads=2, carrier=carrier))
    with torch.no_grad():
        dict(module.named_parameters())[parameter].view(-1)[-1] = bad  # a value row (in_proj) reaches every output
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(5))
    with pytest.raises(ValueError, match=rf"parameter {parameter} must be finite"):
        module(x)


@pytest.mark.parametrize("parameter", ["state_proj.weight", "stored_proj.weight", "value_proj.weight",
                                       "out_proj.weight"])
def test_hopfield_names_a_non_finite_projection(parameter):
    """Hopfield diagnoses its inputs only when the output is not finite; its projections come next, before the
    overflow is blamed."""
    torch.manual_seed(0)
    module = Hopfield(HopfieldConfig(input_size=8, hidden_size=4, value_size=4, output_size=8))
    with torch.no_grad():
        dict(module.named_parameters())[parameter].view(-1)[0] = float("nan")
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(6))
    with pytest.raises(ValueError, match=rf"parameter {parameter} must be finite"):
        module(x, x.clone())
