"""Empirical carrier: A1/A3 against direct formulas and autograd (float64)."""

from __future__ import annotations

import torch

from expattn.core.empirical import Empirical


def test_mean_is_gradient_of_log_normalizer(gen):
    atoms = torch.randn(3, 9, 5, generator=gen, dtype=torch.float64)
    eta = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(Empirical(atoms).log_normalizer(eta).sum(), eta)
    torch.testing.assert_close(Empirical(atoms).mean(eta.detach()), grad, rtol=0, atol=1e-12)
