"""Hypothesis fuzzing of every carrier: batch shapes, query/key/dim sizes, float32/float64, masks.

Invariants checked against independent computations: mean = autograd gradient of G, probabilities
sum to one, masked atoms have zero weight, Fisher = autograd Jacobian of the mean (symmetric, PSD).
"""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from expattn.core.empirical import Empirical
from expattn.core.gaussian import Gaussian
from expattn.core.mixture import GaussianMixture
from expattn.core.tilted import TiltedGamma, TiltedLattice

SETTINGS = settings(max_examples=25, deadline=None)
batch_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
dtypes = st.sampled_from([torch.float32, torch.float64])
TOL = {torch.float32: 2e-4, torch.float64: 1e-10}  # relative rounding of each dtype times a few operations


def autograd_mean(carrier, eta):
    e = eta.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(carrier.log_normalizer(e).sum(), e)
    return grad


def spd(gen, *batch, dim, dtype):
    a = torch.randn(*batch, dim, dim, generator=gen, dtype=torch.float64)
    return (a @ a.mT / dim + 0.5 * torch.eye(dim, dtype=torch.float64)).to(dtype)


@SETTINGS
@given(
    batch=batch_shapes,
    q=st.integers(1, 4),
    k=st.integers(1, 6),
    d=st.integers(1, 5),
    dtype=dtypes,
    mask_kind=st.sampled_from(["none", "key", "query"]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_empirical_fuzz(batch, q, k, d, dtype, mask_kind, weighted, seed):
    gen = torch.Generator().manual_seed(seed)
    atoms = torch.randn(*batch, k, d, generator=gen).to(dtype)
    eta = torch.randn(*batch, q, d, generator=gen).to(dtype)
    log_w = torch.randn(*batch, k, generator=gen).to(dtype) if weighted else None
    mask = None
    if mask_kind != "none":
        shape = (*batch, k) if mask_kind == "key" else (*batch, q, k)
        mask = torch.rand(shape, generator=gen) > 0.5
        mask[..., 0] = True
    carrier = Empirical(atoms, log_w, mask)
    g, mean, probs, fisher = carrier.log_normalizer(eta), carrier.mean(eta), carrier.probs(eta), carrier.fisher(eta)
    assert g.shape == (*batch, q) and mean.shape == (*batch, q, d) and fisher.shape == (*batch, q, d, d)
    assert g.dtype == mean.dtype == dtype
    for out in (g, mean, probs, fisher, carrier.entropy(eta)):
        assert torch.isfinite(out).all()
    torch.testing.assert_close(probs.sum(-1), torch.ones_like(g), rtol=0, atol=TOL[dtype])
    if mask is not None:
        full_mask = mask if mask_kind == "query" else mask.unsqueeze(-2).expand_as(probs)
        assert (probs[~full_mask] == 0).all()
    torch.testing.assert_close(mean, autograd_mean(carrier, eta), rtol=TOL[dtype], atol=TOL[dtype])


def build(kind, gen, batch, d, dtype):
    if kind == "gaussian":
        return Gaussian(torch.randn(*batch, d, generator=gen).to(dtype), spd(gen, *batch, dim=d, dtype=dtype))
    if kind == "mixture_shared":
        return GaussianMixture(torch.randn(*batch, 3, d, generator=gen).to(dtype), spd(gen, *batch, dim=d, dtype=dtype))
    if kind == "mixture_separate":
        weights = torch.rand(*batch, 3, generator=gen).to(dtype) + 0.1
        return GaussianMixture(
            torch.randn(*batch, 3, d, generator=gen).to(dtype), spd(gen, *batch, 3, dim=d, dtype=dtype), weights=weights
        )
    if kind == "gamma":
        eta1 = -(torch.rand(*batch, d, generator=gen) + 2).to(dtype)
        return TiltedGamma(eta1, (torch.rand(*batch, d, generator=gen) - 0.5).to(dtype))
    support = torch.arange(-2.0, 3.0, dtype=dtype)
    return TiltedLattice(
        support, torch.randn(*batch, d, generator=gen).to(dtype), -torch.rand(*batch, d, generator=gen).to(dtype)
    )


@SETTINGS
@given(
    kind=st.sampled_from(["gaussian", "mixture_shared", "mixture_separate", "gamma", "lattice"]),
    batch=batch_shapes,
    q=st.integers(1, 3),
    d=st.integers(1, 3),
    dtype=dtypes,
    seed=st.integers(0, 2**31 - 1),
)
def test_continuous_carriers_fuzz(kind, batch, q, d, dtype, seed):
    gen = torch.Generator().manual_seed(seed)
    carrier = build(kind, gen, batch, d, dtype)
    eta = (torch.rand(*batch, q, d, generator=gen) - 0.5).to(dtype)  # inside every domain (Gamma needs < 2)
    g, mean, fisher = carrier.log_normalizer(eta), carrier.mean(eta), carrier.fisher(eta)
    assert g.shape == (*batch, q) and mean.shape == (*batch, q, d) and fisher.shape[-2:] == (d, d)
    assert g.dtype == mean.dtype == fisher.dtype == dtype
    torch.testing.assert_close(mean, autograd_mean(carrier, eta), rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(fisher, fisher.mT, rtol=0, atol=TOL[dtype])
    assert (torch.linalg.eigvalsh(fisher.double()) > -TOL[dtype]).all()
    x = carrier.sample(eta, 2, generator=gen)
    assert x.shape == (2, *batch, q, d) and torch.isfinite(carrier.log_prob(x, eta)).all()
