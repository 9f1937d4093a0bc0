r"""Random draws on the device of the data, from a generator on any device.

$$\varepsilon \sim \mathcal N(0, I), \qquad \mu \sim \operatorname{Categorical}(p)$$

A ``torch.Generator`` draws only on its own device: a seeded CPU generator keeps a CUDA run
reproducible (the same draws as on the CPU), so the draw happens on the generator's device and
the result moves to the data's. Without a generator the draw happens on the data's device
directly (no host-to-device copy).
"""

from __future__ import annotations

import torch
from torch import Tensor


def _where(generator: torch.Generator | None, like: Tensor) -> torch.device:
    return like.device if generator is None else generator.device


def randn(shape: tuple[int, ...] | torch.Size, like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Standard normal draws of ``shape`` in ``like``'s dtype, on ``like``'s device."""
    draws = torch.randn(shape, generator=generator, dtype=like.dtype, device=_where(generator, like))
    return draws.to(like.device)


def multinomial(probs: Tensor, num_samples: int, generator: torch.Generator | None = None) -> Tensor:
    """``torch.multinomial(probs, num_samples, replacement=True)`` on ``probs``' device: ``(*rows, num_samples)``."""
    where = _where(generator, probs)
    return torch.multinomial(probs.to(where), num_samples, replacement=True, generator=generator).to(probs.device)
