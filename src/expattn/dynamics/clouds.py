r"""Starting clouds ``(batch, token, dim)`` for the dynamics experiments, and cluster counting.

Kinds (all float64, drawn from the given generator):

- ``gaussian``: $x_t \sim N(0, I)$, centred on its sample mean (radially symmetric);
- ``sphere``: $x_t$ uniform on the sphere of radius $\sqrt D$, centred (radially symmetric);
- ``anisotropic``: $N(0, \operatorname{diag}(s)^2)$ with scales $s$ from 0.2 to 2, centred;
- ``offcentre``: $N(m, 0.3^2 I)$ with $\lVert m\rVert = 3$ (not centred);
- ``two_clusters``: $\pm 2 e_1 + N(0, 0.3^2 I)$;
- ``cube``: uniform on $[0, 1]^D$;
- ``lognormal``: $e^{z}$ coordinate-wise, $z \sim N(0, I)$ (skewed).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from scipy.sparse.csgraph import connected_components
from torch import Tensor

from expattn.arguments import finite_number, positive_int
from expattn.dynamics.operators import check_cloud

CLOUD_KINDS = ("gaussian", "sphere", "anisotropic", "offcentre", "two_clusters", "cube", "lognormal")
CENTRED = ("gaussian", "sphere", "anisotropic")


def make_cloud(
    kind: str, batch: int, token: int, dim: int, generator: torch.Generator
) -> Float[Tensor, "batch token dim"]:
    """A cloud of ``kind`` (see the module docstring) with ``batch`` independent draws."""
    if kind not in CLOUD_KINDS:
        raise ValueError(f"kind must be one of {CLOUD_KINDS}, got {kind!r}")
    for name, value in (("batch", batch), ("token", token), ("dim", dim)):
        positive_int(name, value)
    z = torch.randn(batch, token, dim, generator=generator, dtype=torch.float64)
    if kind == "gaussian":
        x = z
    elif kind == "sphere":
        x = math.sqrt(dim) * z / z.norm(dim=-1, keepdim=True)
    elif kind == "anisotropic":
        x = z * torch.linspace(0.2, 2.0, dim, dtype=torch.float64)
    elif kind == "offcentre":
        m = torch.randn(batch, 1, dim, generator=generator, dtype=torch.float64)
        x = 0.3 * z + 3.0 * m / m.norm(dim=-1, keepdim=True)
    elif kind == "two_clusters":
        sign = torch.randint(0, 2, (batch, token, 1), generator=generator).double() * 2 - 1
        x = 0.3 * z + 2.0 * sign * torch.eye(dim, dtype=torch.float64)[0]
    elif kind == "cube":
        x = torch.rand(batch, token, dim, generator=generator, dtype=torch.float64)
    else:
        x = z.exp()
    return x - x.mean(-2, keepdim=True) if kind in CENTRED else x


def count_clusters(x: Float[Tensor, "batch token dim"], radius: float) -> list[int]:
    r"""Number of connected components of the graph $\{(s, t) : \lVert x_s - x_t\rVert < \text{radius}\}$ per cloud."""
    check_cloud(x)
    finite_number("radius", radius, above=0)
    return [int(connected_components((torch.cdist(c, c) < radius).numpy(), directed=False)[0]) for c in x]
