r"""Per-channel central moments up to order 4 of a stream of vectors: streaming, mergeable, float64.

Every channel's excess kurtosis over all the vectors seen, in $4D$ numbers whatever their count; batches and
processes merge exactly through ``stats.merge_central`` (Pebay 2008), the identity ``stats.Moments`` uses along its
projection directions.
"""

from __future__ import annotations

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.arguments import positive_int
from expattn.probes.statistics.stats import merge_central


class ChannelMoments:
    r"""Per channel of a stream of vectors: count $n$, mean and the central power sums
    $M_k = \sum_t (x_{t,c} - \bar x_c)^k$, $k = 2, 3, 4$, float64, merged exactly across batches and processes
    (``merge_central``): the excess kurtosis of every channel over every vector added,
    $\kappa_c = n M_4 / M_2^2 - 3$, in $4D$ numbers whatever the number of vectors.

    Args:
        dim: vector dimension D.

    Fitted attributes: ``n_``, ``mean_``, ``m2_``, ``m3_``, ``m4_`` (each ``(D,)`` float64, on the data's device).
    """

    def __init__(self, dim: int):
        positive_int("dim", dim)
        self.n_ = 0
        self.mean_, self.m2_, self.m3_, self.m4_ = (torch.zeros(dim, dtype=torch.float64) for _ in range(4))

    def update(self, x: Float[Tensor, "token dim"]) -> ChannelMoments:
        """Add a batch of vectors ``(token, D)`` (any float dtype; centred on the batch's own mean in float64)."""
        if x.ndim != 2 or x.shape[1] != self.mean_.shape[0]:
            raise ValueError(f"x must have shape (token, {self.mean_.shape[0]}), got {tuple(x.shape)}")
        if x.shape[0] == 0:
            return self
        y = x.double()
        mean = y.mean(0)
        if y.device.type == "cpu" and not torch.isfinite(mean).all():
            raise ValueError("x holds NaN or infinity")
        c = y - mean
        c2 = c * c
        batch = ChannelMoments(x.shape[1])
        batch.n_, batch.mean_, batch.m2_, batch.m3_, batch.m4_ = (
            y.shape[0], mean, c2.sum(0), (c2 * c).sum(0), (c2 * c2).sum(0))
        return self.merge(batch)

    def merge(self, other: ChannelMoments) -> ChannelMoments:
        """Combine with the moments of another, disjoint set of vectors (in place)."""
        if other.n_ == 0:
            return self
        theirs = tuple(t.to(self.mean_.device if self.n_ else t.device)
                       for t in (other.mean_, other.m2_, other.m3_, other.m4_))
        if self.n_ == 0:
            self.mean_, self.m2_, self.m3_, self.m4_ = (t.clone() for t in theirs)
        else:
            self.mean_, self.m2_, self.m3_, self.m4_ = merge_central(
                self.n_, (self.mean_, self.m2_, self.m3_, self.m4_), other.n_, theirs)
        self.n_ += other.n_
        return self

    def excess_kurtosis_(self) -> Float[Tensor, " dim"]:
        """$n M_4 / M_2^2 - 3$ per channel, ``(D,)``; NaN for a channel that never varied ($M_2 = 0$)."""
        if self.n_ < 2:
            raise ValueError(f"kurtosis needs at least 2 vectors, got n={self.n_}")
        if not bool(torch.isfinite(self.mean_).all()):
            raise ValueError("x holds NaN or infinity")
        m2 = torch.where(self.m2_ > 0, self.m2_, torch.nan)
        return self.n_ * self.m4_ / m2**2 - 3.0
