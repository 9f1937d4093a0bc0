"""Damped Newton conjugate (A10) against scipy.optimize and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import optimize

from expattn.core.empirical import Empirical
from expattn.core.gaussian import Gaussian
from expattn.core.newton import maximise_concave
from expattn.core.tilted import TiltedGamma

F64 = torch.float64


def scipy_conjugate(carrier, m):
    def negative(v):
        e = torch.from_numpy(v)[None].requires_grad_(True)
        g = carrier.log_normalizer(e).sum() - (e * m).sum()
        return g.item(), torch.autograd.grad(g, e)[0][0].numpy()

    return -optimize.minimize(negative, np.zeros(m.shape[-1]), jac=True, method="BFGS", options={"gtol": 1e-11}).fun


def test_empirical_conjugate_is_negative_entropy(gen):
    carrier = Empirical(torch.randn(2, 9, 3, generator=gen, dtype=F64))
    eta = torch.randn(2, 4, 3, generator=gen, dtype=F64)
    m = carrier.mean(eta)
    value, star = maximise_concave(carrier, m)
    torch.testing.assert_close(carrier.mean(star), m, rtol=0, atol=1e-9)
    # unit weights: G*(m) = -H(attention weights)
    torch.testing.assert_close(value, -carrier.entropy(star), rtol=0, atol=1e-9)
    assert abs(value[0, 0].item() - scipy_conjugate(Empirical(carrier.atoms[0]), m[0, :1])) < 1e-8


def test_gaussian_newton_equals_closed_form(gen):
    a = torch.randn(3, 3, generator=gen, dtype=F64)
    carrier = Gaussian(torch.randn(3, generator=gen, dtype=F64), a @ a.T + 0.5 * torch.eye(3, dtype=F64))
    m = torch.randn(5, 3, generator=gen, dtype=F64)
    value, star = maximise_concave(carrier, m)
    closed_value, closed_star = carrier.conjugate(m)
    torch.testing.assert_close(value, closed_value, rtol=0, atol=1e-10)
    torch.testing.assert_close(star, closed_star, rtol=0, atol=1e-8)


def test_domain_respected_and_unreachable_mean_rejected(gen):
    gamma = TiltedGamma(torch.tensor([-2.0, -1.5], dtype=F64), torch.tensor([0.3, -0.2], dtype=F64))
    m = torch.tensor([[5.0, 0.05]], dtype=F64)  # far from the carrier's own mean: steps must stay in the domain
    _, star = maximise_concave(gamma, m)
    assert gamma.in_domain(star).all()
    torch.testing.assert_close(gamma.mean(star), m, rtol=0, atol=1e-8)
    carrier = Empirical(torch.randn(6, 2, generator=gen, dtype=F64))
    outside = carrier.atoms.abs().max() * 3 * torch.ones(1, 2, dtype=F64)  # outside the atoms' convex hull
    with pytest.raises(ValueError, match="not in the interior of the mean space"):
        maximise_concave(carrier, outside, max_iter=30)
