"""Starting clouds, cluster counting, the carrier map, small-beta expansion (B3), verify checks B2/B5."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from expattn.catalogue.registry import RunContext
from expattn.checks.b_operators import hull_distance
from expattn.commands.checks import select, timed_claim
from expattn.dynamics.clouds import CENTRED, CLOUD_KINDS, count_clusters, make_cloud
from expattn.dynamics.metrics import covariance, trace_cov
from expattn.dynamics.operators import AttentionConfig, AttentionUpdate


def test_make_cloud_kinds(gen):
    for kind in CLOUD_KINDS:
        x = make_cloud(kind, 3, 50, 4, gen)
        assert x.shape == (3, 50, 4) and x.dtype == torch.float64
        if kind in CENTRED:
            torch.testing.assert_close(x.mean(-2), torch.zeros(3, 4, dtype=torch.float64), rtol=0, atol=1e-14)
    two = make_cloud("two_clusters", 1, 200, 3, gen)[0]
    assert set(torch.sign(two[:, 0]).tolist()) == {-1.0, 1.0}  # both clusters (at +-2 e1, sd 0.3) are drawn
    with pytest.raises(ValueError, match="kind must be one of"):
        make_cloud("torus", 1, 5, 2, gen)
    with pytest.raises(ValueError, match="token must be an integer >= 1"):
        make_cloud("cube", 1, 0, 2, gen)


def test_count_clusters_on_separated_blobs(gen):
    centres = 10 * torch.randn(5, 3, generator=gen, dtype=torch.float64)
    labels = torch.arange(40) % 5
    x = centres[labels] + 1e-4 * torch.randn(40, 3, generator=gen, dtype=torch.float64)
    assert count_clusters(x[None], radius=0.01) == [5]
    assert count_clusters(x[None], radius=1e-9) == [40]  # every point on its own


def test_carrier_map_matches_formula(gen):
    eta = torch.randn(2, 7, 3, generator=gen, dtype=torch.float64)
    a = torch.randn(3, 3, generator=gen, dtype=torch.float64)
    sigma = a @ a.T + torch.eye(3, dtype=torch.float64)
    op = AttentionUpdate(AttentionConfig(beta=0.8, residual=False), carrier_map=sigma)
    atoms = eta @ sigma.T  # x_n = Sigma eta_n
    w = torch.softmax(0.8 * eta @ atoms.mT, dim=-1)
    torch.testing.assert_close(op(eta), w @ atoms, rtol=0, atol=1e-12)


def test_small_beta_expansion_matches_linearisation(gen):
    """B3: for small beta, grad G(beta eta) = xbar + beta S eta + O(beta^2), so tr ratio = 1 + 2 beta tr S^2 / tr S."""
    beta = 1e-4
    x = make_cloud("anisotropic", 20, 64, 5, gen)
    ratio = trace_cov(AttentionUpdate(AttentionConfig(beta=beta))(x)) / trace_cov(x)
    s = covariance(x)
    predicted = 1 + 2 * beta * (s @ s).diagonal(dim1=-2, dim2=-1).sum(-1) / s.diagonal(dim1=-2, dim2=-1).sum(-1)
    # The remainder is O(beta^2 |S|^2 + beta^2 |third cumulant|); with |S| <= 4 this is far below 1e-6.
    torch.testing.assert_close(ratio, predicted, rtol=0, atol=1e-6)
    assert ((ratio - 1) / (predicted - 1) - 1).abs().max() < 0.01  # the first-order term itself matches


def test_residual_step_never_shrinks_trace(gen):
    """grad G is monotone, so tr Cov(eta + g) >= tr Cov(eta) for every cloud, centred or not (B3)."""
    for kind in CLOUD_KINDS:
        for beta in (0.01, 1.0, 30.0):
            x = make_cloud(kind, 10, 30, 3, gen)
            ratio = trace_cov(AttentionUpdate(AttentionConfig(beta=beta))(x)) / trace_cov(x)
            assert (ratio >= 1 - 1e-12).all(), (kind, beta)


def test_hull_distance_against_known_geometry():
    simplex = np.eye(3)
    assert hull_distance(simplex, np.array([0.2, 0.3, 0.5])) == pytest.approx(0.0, abs=1e-12)
    # Nearest simplex point to (2, 0, 0) in l1 is e1: |2 - w1| + w2 + w3 = 3 - 2 w1 >= 1.
    assert hull_distance(simplex, np.array([2.0, 0.0, 0.0])) == pytest.approx(1.0, abs=1e-9)
    square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert hull_distance(square, np.array([1.5, 0.5])) == pytest.approx(0.5, abs=1e-9)


@pytest.mark.parametrize("claim_id", [pytest.param("B2", marks=pytest.mark.slow), "B5"])
def test_verify_checks_pass_and_b5_as_printed_fails(claim_id):
    (claim,) = select("verify", [claim_id])
    record, seconds = timed_claim(claim, RunContext(seed=3))
    assert record.verdict == "pass", record.notes
    assert record.metrics["max_error"] <= record.metrics["tolerance"]
    if claim_id == "B5":
        assert record.as_printed == "fail"
        assert record.metrics["as_printed_error"] > 1e3 * record.metrics["tolerance"]
    else:
        assert record.metrics["residual_clouds_leaving_hull"] > 0
    assert math.isfinite(seconds) and "seconds" not in record.metrics
