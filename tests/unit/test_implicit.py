"""ImplicitAttention (claims D7, B7): implicit gradients against finite differences and unrolled
backpropagation in float64, stats, non-convergence, spectral radius against an explicit Jacobian."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.func import functional_call

from expattn.core.solvers import SOLVERS
from expattn.nn.implicit import (
    ImplicitAttention,
    ImplicitConfig,
    InjectedAttention,
    NonConvergenceError,
    NonConvergenceWarning,
    spectral_radius,
    unrolled,
)

TIGHT = {"tol": 1e-13, "backward_tol": 1e-13, "max_iter": 300, "backward_max_iter": 300}


def contractive_block(gen, dim=8, heads=2, gain=0.5, norm="layernorm", carrier="empirical"):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    return InjectedAttention(dim, heads=heads, gain=gain, norm=norm, carrier=carrier).double()


class NoFixedPoint(nn.Module):
    """f(z, x) = z + 1 + sigmoid(x): every step moves z by more than 1, so no fixed point exists."""

    def forward(self, z, x):
        return z + 1 + torch.sigmoid(x)


@pytest.mark.parametrize("solver", sorted(SOLVERS))
def test_forward_is_a_fixed_point(gen, solver):
    block = contractive_block(gen)
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    layer = ImplicitAttention(block, ImplicitConfig(solver=solver, tol=1e-10, max_iter=300))
    with torch.no_grad():
        z, stats = layer.forward_with_stats(x)
        residual = (block(z, x) - z).norm() / block(z, x).norm()
    assert stats.forward.converged and stats.forward.method == solver
    # The output is f(z*), one more step of a contraction: its residual is below the solver's.
    assert residual.item() <= 1e-10
    assert layer.last_stats is stats


@pytest.mark.slow
def test_implicit_gradient_passes_gradcheck(gen):
    block = contractive_block(gen, dim=4, heads=1)
    layer = ImplicitAttention(block, ImplicitConfig(**TIGHT))
    x = torch.randn(1, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = block.attention.out_proj.weight.detach().clone().requires_grad_(True)

    def fixed_point(x, weight):
        return functional_call(layer, {"block.attention.out_proj.weight": weight}, (x,))

    # Finite differences with eps 1e-6 on a solve accurate to 1e-13: errors ~1e-7 << atol 1e-5.
    assert torch.autograd.gradcheck(fixed_point, (x, weight), eps=1e-6, atol=1e-5, rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize(("norm", "carrier"), [("layernorm", "empirical"), ("rmsnorm", "gaussian_mixture")])
def test_implicit_gradient_equals_unrolled_gradient(gen, norm, carrier):
    block = contractive_block(gen, norm=norm, carrier=carrier)
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    layer = ImplicitAttention(block, ImplicitConfig(**TIGHT))
    z, stats = layer.forward_with_stats(x)
    weight = torch.randn(z.shape, generator=gen, dtype=torch.float64)
    implicit = torch.autograd.grad((z * weight).sum(), [x, *block.parameters()])
    assert stats.backward is not None and stats.backward.converged
    rho = layer.spectral_radius(x, z).max().item()
    assert rho < 0.9
    # Unrolling n steps leaves an error ~ rho^n: n with (1.2 rho)^n = 1e-14 makes it negligible.
    steps = math.ceil(math.log(1e-14) / math.log(min(1.2 * rho, 0.95)))
    reference = torch.autograd.grad((unrolled(block, x, x, steps) * weight).sum(), [x, *block.parameters()])
    for got, want in zip(implicit, reference, strict=True):
        # Both sides are float64 solves to 1e-13; 1e-9 allows the 1/(1 - rho) amplification.
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


@pytest.mark.slow
def test_phantom_gradient_approaches_implicit_gradient(gen):
    block = contractive_block(gen)
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)

    def grads(**config):
        z = ImplicitAttention(block, ImplicitConfig(**TIGHT, **config))(x)
        return torch.autograd.grad((z * weight).sum(), [x, *block.parameters()])

    exact = grads()
    errors = []
    for steps in (1, 4, 30):
        approx = grads(backward="phantom", phantom_steps=steps)
        errors.append(max((a - e).abs().max().item() for a, e in zip(approx, exact, strict=True)))
    # The phantom error decays like rho^k: it must shrink with k and vanish at k = 30.
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 1e-10 and errors[0] > 1e-6


@pytest.mark.slow
def test_spectral_radius_matches_eigenvalues_of_explicit_jacobian(gen):
    block = contractive_block(gen, dim=6, heads=2, gain=2.0)
    x = torch.randn(2, 4, 6, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        z = ImplicitAttention(block, ImplicitConfig(tol=1e-12, max_iter=300))(x)
    estimate = spectral_radius(lambda s: block(s, x), z, iters=150, generator=gen)
    jac = torch.autograd.functional.jacobian(lambda s: block(s, x), z)  # (B, T, D, B, T, D)
    for b in range(2):
        exact = torch.linalg.eigvals(jac[b, :, :, b].reshape(24, 24)).abs().max().item()
        # Power iteration error decays like (|lambda_2| / |lambda_1|)^n; 2% covers close pairs.
        assert estimate[b].item() == pytest.approx(exact, rel=2e-2)


def test_non_contractive_block_is_reported_as_not_converged(gen):
    x = torch.randn(2, 3, 4, generator=gen, dtype=torch.float64)
    layer = ImplicitAttention(NoFixedPoint(), ImplicitConfig(max_iter=30))
    with pytest.warns(NonConvergenceWarning, match="did not converge"):
        _, stats = layer.forward_with_stats(x)
    assert not stats.forward.converged and stats.forward.residual > 1e-3
    strict = ImplicitAttention(NoFixedPoint(), ImplicitConfig(max_iter=30, on_nonconvergence="raise"))
    with pytest.raises(NonConvergenceError):
        strict(x)


def test_expanding_attention_block_is_not_converged_by_plain_iteration(gen):
    # Identity norm and a large gain: the attention update expands, plain iteration runs away.
    block = contractive_block(gen, gain=20.0, norm="identity")
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64)
    layer = ImplicitAttention(block, ImplicitConfig(solver="fixed_point_iter", max_iter=50))
    with pytest.warns(NonConvergenceWarning):
        _, stats = layer.forward_with_stats(x)
    assert not stats.forward.converged


def test_backward_non_convergence_warns(gen):
    block = contractive_block(gen)
    x = torch.randn(2, 5, 8, generator=gen, dtype=torch.float64, requires_grad=True)
    layer = ImplicitAttention(block, ImplicitConfig(tol=1e-10, backward_tol=1e-14, backward_max_iter=1))
    z, stats = layer.forward_with_stats(x)
    # Random output weights: a layernorm output's sum is constant, so a ones gradient is trivial.
    weight = torch.randn(z.shape, generator=gen, dtype=torch.float64)
    with pytest.warns(NonConvergenceWarning, match="backward"):
        (z * weight).sum().backward()
    assert stats.backward is not None and not stats.backward.converged


@pytest.mark.parametrize(
    "config",
    [
        {"solver": "newton"},
        {"solver_options": {"m": 5}},
        {"backward_options": {"damping": 0.5}},
        {"backward": "unrolled"},
        {"on_nonconvergence": "ignore"},
        {"tol": 0.0},
        {"backward_tol": float("nan")},
        {"max_iter": True},
        {"phantom_steps": 0},
        {"phantom_damping": 1.5},
    ],
)
def test_unknown_or_bad_options_raise(config):
    with pytest.raises(ValueError):
        ImplicitConfig(**config)


def test_bad_arguments_raise(gen):
    with pytest.raises(TypeError, match="block"):
        ImplicitAttention(lambda z, x: z)
    with pytest.raises(ValueError, match=r"^dim must be a multiple of heads, got dim=10, heads=3$"):
        InjectedAttention(10, heads=3)
    with pytest.raises(ValueError, match=r"^heads must be an integer >= 1, got 0$"):
        InjectedAttention(8, heads=0)
    with pytest.raises(ValueError, match=r"^gain must be a finite number > 0, got inf$"):
        InjectedAttention(8, gain=float("inf"))
    with pytest.raises(ValueError, match="normalization"):
        InjectedAttention(8, norm="batchnorm")
    with pytest.raises(ValueError, match="carrier"):
        InjectedAttention(8, carrier="laplace")
    z = torch.zeros(1, 2, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"^iters must be an integer >= 2, got 1$"):
        spectral_radius(lambda s: s, z, iters=1)
    with pytest.raises(ValueError, match=r"^steps must be an integer >= 0, got -1$"):
        unrolled(nn.Identity(), z, z, -1)
    assert unrolled(lambda s, x: s + x, z, z, 0) is z
    layer = ImplicitAttention(contractive_block(gen))
    with pytest.raises(TypeError, match="x"):
        layer([1.0])
    with pytest.raises(ValueError, match="finite"):
        layer(torch.full((1, 2, 8), float("nan"), dtype=torch.float64))


class _Linear(nn.Module):
    """f(z, x) = z A^T + x: the Jacobian is A for every batch element."""

    def __init__(self, a: torch.Tensor) -> None:
        super().__init__()
        self.a = nn.Parameter(a)

    def forward(self, z: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return z @ self.a.T + x


def test_jacobian_penalty_is_an_unbiased_estimate_of_the_frobenius_norm(gen):
    """E[|eps^T J|^2] / n = |A|_F^2 / d for z of shape (B, d); Monte Carlo over 4000 draws, within 4 standard
    errors (two-sided), and the estimate's gradient with respect to A is that of |A|_F^2 / d on average."""
    d = 6
    a = 0.3 * torch.randn(d, d, generator=gen, dtype=torch.float64)
    layer = ImplicitAttention(_Linear(a), ImplicitConfig(tol=1e-12, max_iter=200))
    x = torch.randn(5, d, generator=gen, dtype=torch.float64)
    z = layer(x).detach()
    draws = torch.stack([layer.jacobian_penalty(x, z, gen).detach() for _ in range(4000)])
    exact = (a**2).sum().item() / d
    se = draws.std().item() / math.sqrt(len(draws))
    assert abs(draws.mean().item() - exact) < 4 * se
    assert se < 0.05 * exact  # the test has the power to see a 20% bias
    grads = torch.stack([torch.autograd.grad(layer.jacobian_penalty(x, z, gen), layer.block.a)[0] for _ in range(2000)])
    se_grad = grads.std(0) / math.sqrt(len(grads))
    assert ((grads.mean(0) - 2 * a / d).abs() < 4 * se_grad + 1e-12).float().mean() > 0.95  # ~all 36 entries


def test_jacobian_penalty_is_differentiable_through_attention(gen):
    """The penalty's gradient needs a second derivative of attention (the fused CPU kernel has none): gradcheck in
    float64 with respect to the injected input, the noise fixed by a seeded generator."""
    block = InjectedAttention(4, heads=2, gain=0.5).double()
    layer = ImplicitAttention(block, ImplicitConfig(tol=1e-12, max_iter=200))
    x = torch.randn(1, 3, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    z = layer(x).detach()
    assert torch.autograd.gradcheck(lambda t: layer.jacobian_penalty(t, z, torch.Generator().manual_seed(1)), (x,))
