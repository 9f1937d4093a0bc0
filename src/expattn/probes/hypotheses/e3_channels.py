r"""E3's largest single-channel kurtosis over every kept token of every depth, with a bootstrap interval.

Per depth and channel $c$, over all kept tokens $t$ (first/special and massive tokens left out):

$$\kappa_c = \frac{\mu_{4,c}}{\mu_{2,c}^2} - 3,\qquad K = \max_{c:\ \mu_{2,c} > 0} |\kappa_c|$$

(a channel that never varies has no kurtosis and is left out). The estimate is streamed exactly
(``statistics.channels.ChannelMoments``: central sums merged with Pebay's update, float64). The interval is a
Poisson bootstrap over sequences (``stats.BootstrapMeans``): each sequence $s$ adds its token count $n_s$ and its
power sums $S_{k,s} = \sum_t (x_{t,c} - a_c)^k$, $k = 1..4$, about a fixed shift $a$ (the first batch's channel
means, so that the raw sums do not cancel, ``stats.central_from_raw``); a replicate's moments are its weighted
sums over its weighted count. The 95% interval is the percentile interval over replicates of $|\kappa_{c^\star}|$,
the channel $c^\star = \arg\max_c |\kappa_c|$ chosen on the whole sample: the replicates' own maximum over
channels is biased upward when many channels are alike (each replicate picks its most inflated one; MiniLM's
384 near-Gaussian channels put the point estimate below that interval), so the interval is the chosen channel's.
Processes with different shifts merge after moving one's sums to the other's shift (binomial expansion, exact).
"""

from __future__ import annotations

import copy
import math

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.sizes import bootstrap_bytes
from expattn.probes.statistics.channels import ChannelMoments
from expattn.probes.statistics.stats import BootstrapMeans, central_from_raw

ORDERS = 4


def channel_kurtosis(means: Float[Tensor, "*batch feature"]) -> Float[Tensor, "*batch dim"]:
    r"""$|\kappa_c|$ per channel (module docstring; 0 for a channel that never varies) from mean per-sequence
    vectors ``(..., 1 + 4D)``: the count, then the power sums of orders 1 to 4 about the shift, each ``(D,)``."""
    count = means[..., :1]
    raw = means[..., 1:].unflatten(-1, (ORDERS, -1)) / count.unsqueeze(-1)  # (..., 4, D)
    var, _, c4 = central_from_raw(*raw.unbind(-2))
    kurt = (c4 / var.where(var > 0, 1.0) ** 2 - 3).abs()
    return kurt.where(var > 0, 0.0)


def shift_sums(means: Float[Tensor, "*batch feature"], delta: Float[Tensor, " dim"]) -> Float[Tensor, "*batch feature"]:
    r"""Power sums about $a$ moved to the shift $a - \delta$ (``(..., 1 + 4D)``, any leading axes):
    $\sum_t (x_t - a + \delta)^k = \sum_{j \le k} \binom{k}{j} \delta^{k-j} S_j$, with $S_0$ the count."""
    count = means[..., :1].expand(*means.shape[:-1], delta.shape[0])
    sums = [count, *means[..., 1:].unflatten(-1, (ORDERS, -1)).unbind(-2)]  # S_0 .. S_4, (..., D) each
    moved = [sum(math.comb(k, j) * delta ** (k - j) * sums[j] for j in range(k + 1)) for k in range(1, ORDERS + 1)]
    return torch.cat([means[..., :1], *moved], dim=-1)


class ChannelKurtosis:
    """Per depth: ``moments_`` (``ChannelMoments`` over every kept token), ``boot_`` (``BootstrapMeans`` of the
    sequences' counts and shifted power sums) and ``shift_`` ``(D,)`` (None until the first batch)."""

    def __init__(self, depths: int, dim: int, replicates: int):
        self.moments_ = [ChannelMoments(dim) for _ in range(depths)]
        self.boot_ = [BootstrapMeans(1 + ORDERS * dim, replicates) for _ in range(depths)]
        self.shift_: list[Tensor | None] = [None] * depths

    @staticmethod
    def statistics_bytes(depths: int, dim: int, replicates: int) -> int:
        """Per depth: four float64 ``(D,)`` moments, the shift and the bootstrap sums of ``1 + 4D`` numbers."""
        return depths * (8 * 5 * dim + bootstrap_bytes(1 + ORDERS * dim, replicates))

    def update(self, d: int, x: Float[Tensor, "batch token dim"], w: Float[Tensor, "batch token"],
               weights: Float[Tensor, "batch replicate"]) -> None:
        """Add the tokens of ``x`` with weight ``w`` 1 (0: left out) at depth ``d``; ``weights`` are the sequences'
        bootstrap weights."""
        self.moments_[d].update(x[w.bool()])
        if self.shift_[d] is None:
            self.shift_[d] = self.moments_[d].mean_.clone()
        y = x.double() - self.shift_[d].to(x.device)  # (B, T, D)
        wd = w.double().unsqueeze(1)  # (B, 1, T)
        y2 = y * y
        sums = [torch.bmm(wd, p).squeeze(1) for p in (y, y2, y2 * y, y2 * y2)]  # (B, D) each
        self.boot_[d].update(torch.cat([wd.sum(-1), *sums], dim=1), weights)

    def merge(self, other: ChannelKurtosis) -> ChannelKurtosis:
        for d, (mine, theirs) in enumerate(zip(self.boot_, other.boot_, strict=True)):
            self.moments_[d].merge(other.moments_[d])
            if other.shift_[d] is None:
                continue
            if self.shift_[d] is None:
                self.shift_[d] = other.shift_[d]
            device = theirs.sum_.device
            moved = copy.copy(theirs)  # its sums about this shift; ``other`` is left as it was
            delta = other.shift_[d].to(device) - self.shift_[d].to(device)
            moved.sum_, moved.rep_sum_ = shift_sums(theirs.sum_, delta), shift_sums(theirs.rep_sum_, delta)
            mine.merge(moved)
        return self

    def largest(self) -> tuple[Float[Tensor, " depth"], Float[Tensor, " depth"], Float[Tensor, " depth"]]:
        """Per depth: $K$ from the streamed central moments, and the low and high ends of the 95% bootstrap
        interval of the channel that attains it (module docstring; NaN where a depth saw no sequence): three
        ``(depth,)`` float64 tensors on the data's device, no host read (the depths' moments stacked; the bootstrap
        sums' finiteness is left to the caller's other statistics of the same data, as ``stats.covariance_stack``)."""
        seen = [d for d, (m, b) in enumerate(zip(self.moments_, self.boot_, strict=True)) if b.n_ > 0 and m.n_ > 1]
        dev = self.moments_[seen[0]].mean_.device if seen else torch.device("cpu")
        out = [[torch.tensor(math.nan, dtype=torch.float64, device=dev)] * len(self.moments_) for _ in range(3)]
        if not seen:
            return tuple(torch.stack(o) for o in out)
        m2, m4 = (torch.stack([getattr(self.moments_[d], name) for d in seen]) for name in ("m2_", "m4_"))
        n = torch.tensor([float(self.moments_[d].n_) for d in seen], dtype=torch.float64, device=dev).unsqueeze(-1)
        kurt = (n * m4 / m2.where(m2 > 0, torch.nan) ** 2 - 3).abs().nan_to_num(0.0)  # (seen, D)
        top = kurt.argmax(-1)  # (seen,)
        largest = kurt.gather(-1, top.unsqueeze(-1)).squeeze(-1)
        for j, d in enumerate(seen):
            out[0][d] = largest[j]
            _, out[1][d], out[2][d] = self.boot_[d].interval(lambda m, c=top[j]: channel_kurtosis(m)[..., c],
                                                             check=False)
        return tuple(torch.stack(o) for o in out)
