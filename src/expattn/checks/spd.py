r"""Random symmetric positive definite matrices, two laws, both float64 from a seeded CPU generator.

$$S = \tfrac1d A A^\top + 0.3\, I \quad (A_{ij} \sim \mathcal N(0, 1)), \qquad
S = Q \operatorname{diag}(\lambda_1 \dots \lambda_d)\, Q^\top \quad (\lambda \text{ evenly spaced on } [0.5, 2])$$

The first is a shifted Wishart draw (any spectrum above 0.3); the second fixes the spectrum and draws only the
eigenvectors (condition number 4 in every dimension).
"""

from __future__ import annotations

import torch
from torch import Tensor

from expattn.checks.tools import randn


def wishart_spd(gen: torch.Generator, *batch: int, dim: int) -> Tensor:
    r"""$W/d + 0.3 I$ with $W = AA^\top \sim \operatorname{Wishart}_d(I, d)$, ``(*batch, dim, dim)``: eigenvalues
    >= 0.3."""
    a = randn(gen, *batch, dim, dim)
    return a @ a.mT / dim + 0.3 * torch.eye(dim, dtype=torch.float64)


def spd_with_spectrum(gen: torch.Generator, dim: int) -> Tensor:
    r"""$Q \operatorname{diag}(0.5 \dots 2) Q^\top$, ``(dim, dim)``: eigenvalues evenly spaced on [0.5, 2], $Q$ the
    orthogonal factor of a standard normal ``(dim, dim)`` matrix (a random rotation)."""
    q, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    return q @ torch.diag(torch.linspace(0.5, 2.0, dim, dtype=torch.float64)) @ q.T
