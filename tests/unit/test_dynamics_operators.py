"""Cloud operators: attention update (B1), convex hull (B2), Theorem 1's RN∘A (B5), MLP, Compose, run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.optimize import linprog
from scipy.special import logsumexp

from expattn.dynamics.metrics import covariance, diameter
from expattn.dynamics.operators import AttentionConfig, AttentionUpdate, Compose, FeedForward, FeedForwardConfig
from expattn.dynamics.run import run
from expattn.nn.norms import NormConfig, Whitening


def _x(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


def _attention(q, k, beta):
    w = torch.exp(beta * q @ k.mT)
    return (w / w.sum(-1, keepdim=True)) @ k


@pytest.mark.parametrize("residual", [False, True])
def test_self_attention_update_matches_softmax_formula(gen, residual):
    x = _x(gen, 2, 9, 4)
    op = AttentionUpdate(AttentionConfig(beta=0.7, step=0.3, residual=residual))
    expected = x + 0.3 * _attention(x, x, 0.7) if residual else _attention(x, x, 0.7)
    torch.testing.assert_close(op(x), expected, rtol=0, atol=1e-12)


def test_fixed_carrier_and_query_map(gen):
    x, atoms, w = _x(gen, 3, 5, 4), _x(gen, 7, 4), _x(gen, 4, 4)
    op = AttentionUpdate(AttentionConfig(beta=1.3, residual=False), atoms=atoms, query_map=w)
    torch.testing.assert_close(op(x), _attention(x @ w.T, atoms, 1.3), rtol=0, atol=1e-12)


def test_mixture_carrier_is_tilted_mean_by_quadrature(gen):
    """1-D kernel-smoothed cloud h = mean_n N(x_n, s^2): grad G(beta*eta) = E[x] under h(x) e^{x beta eta}."""
    atoms, s, beta = _x(gen, 6, 1), 0.8, 0.9
    eta = _x(gen, 1, 5, 1)
    config = AttentionConfig(beta=beta, residual=False, carrier="gaussian_mixture", bandwidth=s)
    op = AttentionUpdate(config, atoms=atoms)
    grid = np.linspace(-40, 40, 400001)
    log_h = logsumexp(-((grid[:, None] - atoms[:, 0].numpy()) ** 2) / (2 * s**2), axis=1)
    for i, e in enumerate(eta[0, :, 0].numpy()):
        logw = log_h + grid * beta * e
        w = np.exp(logw - logw.max())
        expected = (grid * w).sum() / w.sum()  # Riemann sum on a fine grid: error far below 1e-8
        assert op(eta)[0, i, 0].item() == pytest.approx(expected, abs=1e-8)


def test_gaussian_carrier_is_affine(gen):
    """One atom mu with covariance Sigma is h = N(mu, Sigma): A(eta) = eta + mu + Sigma eta (A5, Thm. 1)."""
    d = 3
    mu, a = _x(gen, d), _x(gen, d, d)
    sigma = a @ a.T + torch.eye(d, dtype=torch.float64)
    op = AttentionUpdate(AttentionConfig(carrier="gaussian_mixture"), atoms=mu[None], covariance=sigma)
    eta = _x(gen, 2, 8, d)
    torch.testing.assert_close(op(eta), mu + eta @ (torch.eye(d, dtype=torch.float64) + sigma).T, rtol=0, atol=1e-12)


def test_theorem1_rn_after_a_fixes_the_equilibrium_moments(gen):
    """RN∘A maps a cloud with p_eq's exact moments to itself (the composite is the identity)."""
    d, n = 3, 400
    mu, a = _x(gen, d), _x(gen, d, d)
    sigma = a @ a.T + 0.5 * torch.eye(d, dtype=torch.float64)
    eta0, lam0 = torch.linalg.solve(sigma, mu), torch.linalg.inv(sigma)
    rn = Whitening(NormConfig(dim=d, target_mean=eta0, target_cov=lam0))
    attn = AttentionUpdate(AttentionConfig(carrier="gaussian_mixture"), atoms=mu[None], covariance=sigma)
    cloud = rn(_x(gen, 1, n, d))  # a p_eq sample with moments made exact by one RN
    out = Compose(attn, rn)(cloud)
    torch.testing.assert_close(out, cloud, rtol=0, atol=1e-9)
    torch.testing.assert_close(covariance(out)[0], lam0, rtol=0, atol=1e-10)


def test_no_residual_output_is_in_convex_hull(gen):
    """LP feasibility: every output is sum_n w_n x_n with w >= 0, sum w = 1 (B2)."""
    x = _x(gen, 1, 12, 3)
    y = AttentionUpdate(AttentionConfig(beta=2.0, residual=False))(x)
    pts = x[0].numpy()
    a_eq = np.vstack([pts.T, np.ones(len(pts))])
    for target in y[0].numpy():
        res = linprog(np.zeros(len(pts)), A_eq=a_eq, b_eq=np.append(target, 1.0), bounds=(0, None))
        assert res.status == 0
    # A residual step leaves the hull: the LP for its outputs is infeasible for some point.
    z = AttentionUpdate(AttentionConfig(beta=2.0))(x)[0].numpy()
    status = [linprog(np.zeros(len(pts)), A_eq=a_eq, b_eq=np.append(t, 1.0), bounds=(0, None)).status for t in z]
    assert 2 in status


def test_diameter_never_grows_without_residual(gen):
    x = 2 * _x(gen, 4, 30, 5)
    traj = run(x, AttentionUpdate(AttentionConfig(beta=1.5, residual=False)), 25, metrics=["diameter"])
    d = traj.metrics["diameter"]
    assert (d[1:] <= d[:-1] * (1 + 1e-12)).all()  # allowance: rounding of the float64 distances
    assert (d[-1] < d[0]).all()


def test_feedforward_matches_explicit_mlp(gen):
    cfg = FeedForwardConfig(dim=4, hidden=6, gain=1.5, seed=3)
    ff = FeedForward(cfg)
    x = _x(gen, 2, 5, 4)
    h = torch.nn.functional.gelu(x @ ff.w1.T + ff.b1)
    torch.testing.assert_close(ff(x), x + h @ ff.w2.T + ff.b2, rtol=0, atol=1e-12)
    given = torch.nn.Linear(4, 4, dtype=torch.float64)
    ff2 = FeedForward(FeedForwardConfig(dim=4, hidden=1, residual=False), mlp=given)
    torch.testing.assert_close(ff2(x), given(x), rtol=0, atol=0)


def test_compose_order_and_run_records(gen):
    x = _x(gen, 2, 10, 3)
    a = AttentionUpdate(AttentionConfig(beta=0.5))
    n = Whitening(NormConfig(dim=3))
    torch.testing.assert_close(Compose(a, n)(x), n(a(x)), rtol=0, atol=0)
    traj = run(x, Compose(a, n), 4, metrics=["trace_cov", "diameter"], keep=[0, 4])
    assert traj.metrics["trace_cov"].shape == (5, 2)
    torch.testing.assert_close(traj.metrics["trace_cov"][1:], torch.full((4, 2), 3.0, dtype=torch.float64))
    torch.testing.assert_close(traj.snapshots[4], traj.final, rtol=0, atol=0)
    torch.testing.assert_close(traj.metrics["diameter"][0], diameter(x), rtol=0, atol=0)


def test_bad_input_raises(gen):
    x = _x(gen, 1, 6, 3)
    with pytest.raises(ValueError, match="beta must be a finite number > 0"):
        AttentionConfig(beta=0.0)
    with pytest.raises(ValueError, match="carrier must be one of"):
        AttentionConfig(carrier="laplace")
    with pytest.raises(ValueError, match="needs carrier='gaussian_mixture'"):
        AttentionUpdate(AttentionConfig(), covariance=torch.eye(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="atoms has last dimension 4"):
        AttentionUpdate(AttentionConfig(), atoms=_x(gen, 5, 4))(x)
    with pytest.raises(ValueError, match="steps must be an integer >= 1"):
        run(x, AttentionUpdate(AttentionConfig()), 0)
    with pytest.raises(ValueError, match="unknown metrics"):
        run(x, AttentionUpdate(AttentionConfig()), 1, metrics=["volume"])
    with pytest.raises(ValueError, match="non-finite value at step 1"):
        run(x, lambda c: c * float("inf"), 2)
    with pytest.raises(ValueError, match="shape"):
        run(x, lambda c: c[:, :3], 2)
    with pytest.raises(ValueError, match="batch, token, dim"):
        AttentionUpdate(AttentionConfig())(_x(gen, 6, 3))
    with pytest.raises(TypeError, match="operators\\[1\\]"):
        Compose(AttentionUpdate(AttentionConfig()), "layernorm")
    with pytest.raises(ValueError, match="expected 4"):
        FeedForward(FeedForwardConfig(dim=4, hidden=2))(x)


def test_registered_measure_as_fixed_carrier(gen):
    """A Gaussian carrier object gives A(eta) = eta + mu + Sigma (beta eta) (A5), same as the one-atom mixture."""
    from expattn.core.gaussian import Gaussian

    d = 3
    mu, a = _x(gen, d), _x(gen, d, d)
    sigma = a @ a.T + torch.eye(d, dtype=torch.float64)
    eta = _x(gen, 2, 6, d)
    op = AttentionUpdate(AttentionConfig(beta=0.5), measure=Gaussian(mu, sigma))
    torch.testing.assert_close(op(eta), eta + mu + 0.5 * eta @ sigma.T, rtol=0, atol=1e-12)
    one_atom = AttentionUpdate(AttentionConfig(beta=0.5, carrier="gaussian_mixture"), atoms=mu[None], covariance=sigma)
    torch.testing.assert_close(one_atom(eta), op(eta), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="measure replaces atoms"):
        AttentionUpdate(AttentionConfig(), atoms=mu[None], measure=Gaussian(mu, sigma))
    with pytest.raises(ValueError, match="measure has dim 3"):
        op(_x(gen, 1, 4, 2))
