"""Fixed-point solvers (claim D7): solutions against exact linear solves and scipy, stats, errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import scipy.sparse.linalg
import torch

from expattn.core.solvers import SOLVERS, solve, solver_options

METHODS = sorted(SOLVERS)


def contractive_linear(gen, batch: int, n: int, rho: float):
    """f(z) = A z + b, A symmetric with spectral radius rho < 1, and its fixed point (I - A)^{-1} b."""
    a = torch.randn(batch, n, n, generator=gen, dtype=torch.float64)
    a = a + a.mT
    a = rho * a / torch.linalg.eigvals(a).abs().amax(-1)[:, None, None]
    b = torch.randn(batch, n, generator=gen, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(n, dtype=torch.float64) - a, b)
    return (lambda z: (a @ z[..., None])[..., 0] + b), exact


def relative_residual(f, z):
    fz = f(z)
    return ((fz - z).flatten(1).norm(dim=1) / fz.flatten(1).norm(dim=1)).max().item()


@pytest.mark.parametrize("method", METHODS)
def test_reaches_tolerance_on_linear_contraction(gen, method):
    f, exact = contractive_linear(gen, batch=3, n=20, rho=0.7)
    z, stats = solve(f, torch.zeros_like(exact), method=method, tol=1e-10, max_iter=500)
    assert stats.converged and not stats.diverged
    # The reported residual is the one of the returned iterate (recomputed here independently).
    assert relative_residual(f, z) <= 1e-10
    assert stats.residual == pytest.approx(relative_residual(f, z), rel=1e-6)
    # Error <= residual * |f(z)| / (1 - rho) = 1e-10 * |f(z)| / 0.3 for symmetric A; 1e-7 leaves slack.
    torch.testing.assert_close(z, exact, rtol=0, atol=1e-7 * exact.abs().max().item())


@pytest.mark.parametrize("method", METHODS)
def test_reaches_tolerance_on_nonlinear_map_against_scipy(gen, method):
    n = 12
    a = 0.9 * torch.randn(n, n, generator=gen, dtype=torch.float64) / n**0.5
    b = torch.randn(n, generator=gen, dtype=torch.float64)

    def f(z):
        return torch.tanh(z @ a.T + b)

    z, stats = solve(f, torch.zeros(1, n, dtype=torch.float64), method=method, tol=1e-11, max_iter=500)
    assert stats.converged
    an, bn = a.numpy(), b.numpy()
    root = scipy.optimize.root(lambda v: np.tanh(an @ v + bn) - v, np.zeros(n), tol=1e-14)
    assert root.success
    # Both solve to ~1e-11 relative; the map's Lipschitz constant is below 1 so errors stay that size.
    np.testing.assert_allclose(z[0].numpy(), root.x, rtol=0, atol=1e-9)


@pytest.mark.parametrize("method", METHODS)
def test_stats_count_every_evaluation(gen, method):
    f, exact = contractive_linear(gen, batch=2, n=10, rho=0.8)
    calls = []

    def counted(z):
        calls.append(1)
        return f(z)

    _, stats = solve(counted, torch.zeros_like(exact), method=method, tol=1e-8, max_iter=300)
    assert stats.evaluations == len(calls)
    assert len(stats.trace) == stats.evaluations
    assert stats.evaluations == stats.iterations + 1
    assert len(stats.residuals) == 2 and max(stats.residuals) == stats.residual
    assert stats.trace[-1] <= 1e-8 < stats.trace[0]


def test_anderson_needs_fewer_evaluations_than_plain_iteration(gen):
    f, exact = contractive_linear(gen, batch=2, n=30, rho=0.9)
    _, plain = solve(f, torch.zeros_like(exact), method="fixed_point_iter", tol=1e-8, max_iter=2000)
    _, accel = solve(f, torch.zeros_like(exact), method="anderson", tol=1e-8, max_iter=2000, memory=20)
    assert plain.converged and accel.converged
    assert accel.evaluations < plain.evaluations


def test_anderson_with_full_memory_matches_gmres_on_a_linear_map(gen):
    # On f(z) = A z + b, Anderson with memory >= iterations and no ridge evaluates f at f(x_k), x_k the
    # k-th GMRES iterate on (I - A) z = b (Walker & Ni 2011): it needs GMRES's iterations + 2
    # evaluations (f(z0), and f at its last iterate), +-1 because the two stop on different norms.
    n = 40
    a = torch.randn(n, n, generator=gen, dtype=torch.float64)
    a = 0.9 * a / torch.linalg.eigvals(a).abs().max()
    b = torch.randn(n, generator=gen, dtype=torch.float64)
    exact = torch.linalg.solve(torch.eye(n, dtype=torch.float64) - a, b)
    _, stats = solve(lambda z: z @ a.T + b, torch.zeros(1, n, dtype=torch.float64), method="anderson", tol=1e-8,
                     max_iter=200, memory=60, regularization=0.0)
    steps = []
    scipy.sparse.linalg.gmres(np.eye(n) - a.numpy(), b.numpy(), rtol=1e-8 * exact.norm().item() / b.norm().item(),
                              restart=n, maxiter=1, callback=steps.append, callback_type="pr_norm")
    assert stats.converged
    assert len(steps) + 1 <= stats.evaluations <= len(steps) + 3


def test_anderson_solves_each_batch_element_on_its_own(gen):
    # Per-element least squares: with a tolerance no element reaches, the batch's iterates after
    # 12 updates are those of each element solved alone (up to rounding of the batched algebra).
    f, exact = contractive_linear(gen, batch=3, n=15, rho=0.95)
    z0 = torch.randn(exact.shape, generator=gen, dtype=torch.float64)
    together, _ = solve(f, z0, method="anderson", tol=1e-300, max_iter=12, memory=4)
    for k in range(3):
        alone, _ = solve(lambda z, k=k: f(z.expand(3, -1))[k : k + 1], z0[k : k + 1], method="anderson",
                         tol=1e-300, max_iter=12, memory=4)
        torch.testing.assert_close(together[k : k + 1], alone, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("restart", "plain_step"), [(4.0, True), (float("inf"), False)])
def test_anderson_restarts_after_residual_growth(gen, restart, plain_step):
    # f is a contraction except that its 4th call adds a large kick, so the residual there grows far
    # beyond `restart` times its smallest value. The safeguard clears the history: the next iterate
    # is then the plain step f(z_3) exactly; without it (restart = inf) Anderson mixes in the old
    # iterates. Either way it still reaches the fixed point of the contraction.
    g, exact = contractive_linear(gen, batch=1, n=8, rho=0.5)
    kick = 100 * torch.randn(exact.shape, generator=gen, dtype=torch.float64)
    inputs, outputs = [], []

    def f(z):
        out = g(z) + (kick if len(inputs) == 3 else 0)
        inputs.append(z.clone())
        outputs.append(out.clone())
        return out

    z, stats = solve(f, torch.zeros_like(exact), method="anderson", tol=1e-10, max_iter=200, restart=restart)
    assert stats.converged
    # residual 1e-10 and rho 0.5: error <= 2e-10 |f(z)|, 1e-8 leaves slack.
    torch.testing.assert_close(z, exact, rtol=0, atol=1e-8 * exact.abs().max().item())
    # Iterate 4 equals f(z_3) to rounding only if the history was cleared (the mixed iterate is O(1) away).
    assert torch.allclose(inputs[4], outputs[3], rtol=1e-12, atol=1e-12) is plain_step


@pytest.mark.parametrize(("stall", "plain_step"), [(3, True), (100, False)])
def test_anderson_restarts_after_stalling(gen, stall, plain_step):
    # The k-th call returns z + (1 + k/100) c: the residual norm grows by less than `restart` and never
    # reaches a new smallest value. After `stall` such updates the history is cleared and the next
    # iterate is the plain step f(z_3); while the history is kept, the mixing of the past f(z_i) is not.
    c = torch.randn(2, 6, generator=gen, dtype=torch.float64)
    inputs, outputs = [], []

    def f(z):
        inputs.append(z.clone())
        outputs.append(z + (1 + len(outputs) / 100) * c)
        return outputs[-1]

    solve(f, torch.zeros_like(c), method="anderson", tol=1e-12, max_iter=6, stall=stall)
    # z_4 - f(z_3) is either 0 up to rounding (cleared) or O(|c|) (mixed): 1e-10 separates them.
    assert torch.allclose(inputs[4], outputs[3], rtol=0, atol=1e-10) is plain_step


@pytest.mark.parametrize("method", METHODS)
def test_map_without_fixed_point_is_not_converged(gen, method):
    # f(z) = z + 1 has no fixed point; every iterate moves by at most O(1) per step, so after 40
    # steps the relative residual is still of order 1 / 40, far above tol.
    z0 = torch.randn(2, 5, generator=gen, dtype=torch.float64)
    _, stats = solve(lambda z: z + 1, z0, method=method, tol=1e-6, max_iter=40)
    assert not stats.converged and stats.iterations == 40
    assert stats.residual > 1e-3


def test_chaotic_map_is_not_converged_by_plain_iteration(gen):
    # The logistic map 4 z (1 - z) is chaotic on (0, 1): its fixed points 0 and 3/4 repel.
    z0 = torch.rand(3, 4, generator=gen, dtype=torch.float64) * 0.8 + 0.1
    _, stats = solve(lambda z: 4 * z * (1 - z), z0, method="fixed_point_iter", tol=1e-6, max_iter=200)
    assert not stats.converged and not stats.diverged
    assert stats.residual > 1e-3


def test_overflowing_map_is_reported_as_diverged(gen):
    z0 = torch.rand(2, 3, generator=gen, dtype=torch.float64) + 1.0
    _, stats = solve(lambda z: z * z + 1, z0, method="fixed_point_iter", tol=1e-6, max_iter=100)
    assert stats.diverged and not stats.converged
    assert stats.evaluations < 100


def test_unknown_option_raises():
    z0 = torch.zeros(1, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="unknown option"):
        solve(torch.cos, z0, method="anderson", m=5)
    with pytest.raises(ValueError, match="method"):
        solve(torch.cos, z0, method="newton")
    assert set(solver_options("anderson")) == {"memory", "regularization", "mixing", "restart", "stall"}


@pytest.mark.parametrize(
    ("method", "options"),
    [
        ("anderson", {"memory": 0}),
        ("anderson", {"mixing": 1.5}),
        ("anderson", {"restart": 1.0}),
        ("anderson", {"stall": 0}),
        ("anderson", {"regularization": -1e-3}),
        ("fixed_point_iter", {"damping": 0.0}),
        ("broyden", {"memory": 2.5}),
        ("broyden", {"tol": -1.0}),
        ("broyden", {"max_iter": 0}),
    ],
)
def test_bad_option_values_raise(method, options):
    with pytest.raises(ValueError):
        solve(torch.cos, torch.zeros(1, 2, dtype=torch.float64), method=method, **options)


def test_bad_inputs_raise():
    with pytest.raises(TypeError, match="z0"):
        solve(torch.cos, [0.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        solve(torch.cos, torch.tensor([[float("nan")]]))
    with pytest.raises(ValueError, match="same shape"):
        solve(lambda z: z.sum(-1), torch.ones(2, 3))
