"""Normalizations (B4, C2, Theorem 1's RN) against torch's modules and exact moment identities."""

from __future__ import annotations

import pytest
import torch

from expattn.nn.norms import NormConfig, build_norm, norm_names, register_norm, spread


def _cloud(gen, *shape, scale=2.0):
    return scale * torch.randn(*shape, generator=gen, dtype=torch.float64) + 0.7


@pytest.mark.parametrize("affine", [False, True])
def test_layernorm_matches_torch(gen, affine):
    x = _cloud(gen, 3, 11, 7)
    ours = build_norm("layernorm", NormConfig(dim=7, eps=1e-5, elementwise_affine=affine)).double()
    ref = torch.nn.LayerNorm(7, eps=1e-5, elementwise_affine=affine).double()
    if affine:
        with torch.no_grad():
            w, b = torch.randn(2, 7, generator=gen, dtype=torch.float64)
            ours.weight.copy_(w), ours.bias.copy_(b), ref.weight.copy_(w), ref.bias.copy_(b)
    # Same float64 formula, different reduction order: agreement to a few ulps of O(1) values.
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("affine", [False, True])
def test_rmsnorm_matches_torch(gen, affine):
    x = _cloud(gen, 2, 13, 5)
    ours = build_norm("rmsnorm", NormConfig(dim=5, eps=1e-6, elementwise_affine=affine)).double()
    ref = torch.nn.RMSNorm(5, eps=1e-6, elementwise_affine=affine).double()
    if affine:
        with torch.no_grad():
            w = torch.randn(5, generator=gen, dtype=torch.float64)
            ours.weight.copy_(w), ref.weight.copy_(w)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-12)


def test_sphere_projects_to_radius_and_keeps_direction(gen):
    x = _cloud(gen, 4, 9, 6)
    y = build_norm("sphere", NormConfig(dim=6, radius=2.5))(x)
    torch.testing.assert_close(y.norm(dim=-1), torch.full((4, 9), 2.5, dtype=torch.float64), rtol=0, atol=1e-12)
    cos = torch.nn.functional.cosine_similarity(x, y, dim=-1)
    torch.testing.assert_close(cos, torch.ones_like(cos), rtol=0, atol=1e-12)


def test_whitening_hits_target_mean_and_covariance(gen):
    d = 4
    a = torch.randn(d, d, generator=gen, dtype=torch.float64)
    target_cov = a @ a.T + 0.5 * torch.eye(d, dtype=torch.float64)
    target_mean = torch.randn(d, generator=gen, dtype=torch.float64)
    norm = build_norm("whitening", NormConfig(dim=d, target_mean=target_mean, target_cov=target_cov))
    # An anisotropic, shifted, skewed cloud: the map is affine, so the moments are exact.
    x = torch.randn(3, 50, d, generator=gen, dtype=torch.float64).exp() @ torch.randn(d, d, generator=gen).double()
    y = norm(x)
    centred = y - y.mean(-2, keepdim=True)
    cov = centred.mT @ centred / y.shape[-2]
    torch.testing.assert_close(y.mean(-2), target_mean.expand(3, d), rtol=0, atol=1e-10)
    torch.testing.assert_close(cov, target_cov.expand(3, d, d), rtol=0, atol=1e-10)
    # A positive rescaling and a shift of the input cloud are undone completely.
    torch.testing.assert_close(norm(3.0 * x - 1.5), y, rtol=0, atol=1e-9)


def test_contraction_factor_is_spread_ratio(gen):
    x = _cloud(gen, 2, 30, 8, scale=5.0)
    norm = build_norm("layernorm", NormConfig(dim=8))
    factor = norm.contraction(x)
    direct = spread(norm(x)) / spread(x)
    torch.testing.assert_close(factor, direct, rtol=1e-12, atol=0)
    assert (factor < 1).all()  # a cloud of spread ~ 5*sqrt(8) is mapped to one of spread <= sqrt(8)
    ident = build_norm("identity", NormConfig(dim=8)).contraction(x)
    torch.testing.assert_close(ident, torch.ones(2, dtype=torch.float64), rtol=0, atol=1e-12)


def test_registry_and_bad_input(gen):
    assert set(norm_names()) >= {"identity", "layernorm", "rmsnorm", "sphere", "whitening"}
    with pytest.raises(ValueError, match="known: identity"):
        build_norm("batchnorm", NormConfig(dim=3))
    with pytest.raises(ValueError, match="already registered"):
        register_norm("sphere", lambda c: None, per_token=True, affine=False)
    with pytest.raises(TypeError, match="per_token must be a bool"):
        register_norm("unused_name", lambda c: None, per_token=1, affine=False)
    with pytest.raises(ValueError, match="dim must be"):
        NormConfig(dim=0)
    with pytest.raises(ValueError, match="radius"):
        NormConfig(dim=3, radius=-1.0)
    norm = build_norm("whitening", NormConfig(dim=3))
    with pytest.raises(ValueError, match="last dimension 4"):
        norm(torch.randn(10, 4, generator=gen))
    with pytest.raises(ValueError, match="more tokens than features"):
        norm(torch.randn(3, 3, generator=gen))
    with pytest.raises(ValueError, match="singular"):
        norm(torch.randn(10, 1, generator=gen).expand(10, 3).double())
    with pytest.raises(ValueError, match="positive definite"):
        build_norm("whitening", NormConfig(dim=2, target_cov=-torch.eye(2)))
    with pytest.raises(TypeError, match="floating"):
        build_norm("sphere", NormConfig(dim=2))(torch.ones(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="finite"):
        build_norm("rmsnorm", NormConfig(dim=2))(torch.tensor([[1.0, float("nan")]]))


def test_ridge_whitening_of_a_singular_cloud_matches_its_closed_form(gen):
    """ridge > 0: y = Lambda^1/2 (S + lam I)^-1/2 (x - mean), so Cov(y) = Lambda^1/2 S (S + lam I)^-1 Lambda^1/2,
    computed here independently with numpy eigendecompositions (float64 round-off: 1e-10)."""
    import numpy as np

    d, lam_rel = 4, 1e-2
    basis = torch.randn(2, d, generator=gen, dtype=torch.float64)
    x = torch.randn(30, 2, generator=gen, dtype=torch.float64) @ basis + 1.5  # rank 2 of 4: singular
    target = torch.randn(d, d, generator=gen, dtype=torch.float64)
    target = target @ target.T + torch.eye(d, dtype=torch.float64)
    with pytest.raises(ValueError, match="singular"):
        build_norm("whitening", NormConfig(dim=d, target_cov=target))(x)
    y = build_norm("whitening", NormConfig(dim=d, target_cov=target, ridge=lam_rel))(x)
    xc = (x - x.mean(0)).numpy()
    s = xc.T @ xc / len(xc)
    lam = lam_rel * np.trace(s) / d
    e, v = np.linalg.eigh(target.numpy())
    root = v @ np.diag(np.sqrt(e)) @ v.T
    expected = root @ s @ np.linalg.inv(s + lam * np.eye(d)) @ root
    yc = (y - y.mean(0)).numpy()
    np.testing.assert_allclose(yc.T @ yc / len(yc), expected, rtol=0, atol=1e-10)
    np.testing.assert_allclose(y.mean(0).numpy(), 0.0, atol=1e-12)
    assert np.abs(yc.T @ yc / len(yc) - target.numpy()).max() > 0.1  # the ridge does change the map here
    with pytest.raises(ValueError, match="ridge"):
        NormConfig(dim=d, ridge=-1.0)


def test_ridge_whitening_of_an_anisotropic_singular_float32_cloud(gen):
    """A training-like cloud: rank 3 of 64, one direction 100 times the others, float32. The ridge bounds the
    condition number by 1 + D/ridge, so no error; the output covariance S (S + lam I)^-1 (target identity) is
    checked against float64 numpy to 1e-2 absolute (float32 eps 1.2e-7 times that bound, 6.4e4: ~8e-3)."""
    import numpy as np

    d, ridge = 64, 1e-3
    basis = torch.randn(3, d, generator=gen)
    coef = torch.randn(200, 3, generator=gen) * torch.tensor([100.0, 1.0, 1.0])
    x = coef @ basis
    y = build_norm("whitening", NormConfig(dim=d, ridge=ridge))(x)
    xc = (x - x.mean(0)).double().numpy()
    s = xc.T @ xc / len(xc)
    expected = s @ np.linalg.inv(s + ridge * np.trace(s) / d * np.eye(d))
    yc = (y - y.mean(0)).double().numpy()
    assert np.isfinite(yc).all()
    np.testing.assert_allclose(yc.T @ yc / len(yc), expected, rtol=0, atol=1e-2)
