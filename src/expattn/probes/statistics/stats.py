r"""Streaming, mergeable statistics in float64: memory independent of the number of tokens.

``Moments`` keeps the count $n$, mean $\mu$, scatter $M_2 = \sum (x-\mu)(x-\mu)^\top$ (optional)
and, along fixed projection directions, central moments of order 2 to 4. Two halves merge
exactly (Chan et al. 1979 for the mean and scatter, Pebay 2008 for the higher orders):

$$\delta = \mu_b - \mu_a,\quad M_2 = M_{2a} + M_{2b} + \delta\delta^\top \tfrac{n_a n_b}{n}$$

``BootstrapMeans`` is a Poisson bootstrap (Hanley & MacGibbon 2006): each sequence gets, per
replicate, a weight drawn from Poisson(1) seeded by ``(seed, sequence index)``; weighted sums
are kept per replicate, so intervals need no stored data and do not depend on the sharding.

Devices: accumulators start on the CPU and move, once, to the device of the first data they
receive; half-precision data is reduced in float32, the accumulators are float64.

Lower memory: ``dtype=torch.float32`` keeps the ``(D, D)`` accumulators (``Moments.scatter_``,
``regression.CrossMoments.sxx_`` and ``sxy_``) in float32, half the bytes; means, counts and everything else stay
float64. Every batch is still centred on its own float64 mean and merged with Chan's update, so each
term added is a central quantity and the float32 rounding stays relative to the spread (~1e-7 per
merge), not to the squared mean, however far the data sit from 0. Read-outs (``covariance_``,
``ridge``, ``r_squared``) convert to float64 first.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from expattn.arguments import positive_int

ACCUMULATOR_DTYPES = (torch.float64, torch.float32)


def accumulator_dtype(dtype: torch.dtype) -> torch.dtype:
    """``dtype`` if it may hold the ``(D, D)`` accumulators (float64 or float32), else ValueError."""
    if dtype not in ACCUMULATOR_DTYPES:
        raise ValueError(f"dtype of the statistics must be torch.float64 or torch.float32, got {dtype!r}")
    return dtype


def _numpy_blas(*xs: Tensor) -> bool:
    """Whether products of ``xs`` go through numpy's BLAS: CPU float32/float64 without autograd, and torch on
    one thread (with more, numpy's OpenBLAS threads would compete with torch's own pool for the same
    cores: the probe ran 2-3x slower that way)."""
    return torch.get_num_threads() == 1 and all(
        x.device.type == "cpu" and not x.requires_grad and x.dtype in (torch.float32, torch.float64) for x in xs
    )


def gram(x: Float[Tensor, "*batch token dim"]) -> Float[Tensor, "*batch dim dim"]:
    r"""$x^\top x$ (per leading index) in the dtype of ``x``. On one torch thread (``_numpy_blas``) through
    numpy, whose matmul recognises a product of a matrix with its own transpose and calls BLAS ``syrk``:
    half the multiply-adds of a general product (1.8x faster than ``torch.mm`` for a 2,016 x 384 float32
    batch on this project's CPU machine)."""
    if not _numpy_blas(x):
        return x.mT @ x
    a = x.contiguous().numpy()
    return torch.from_numpy(a.swapaxes(-1, -2) @ a)


def cross(x: Float[Tensor, "token dx"], y: Float[Tensor, "token dy"]) -> Float[Tensor, "dx dy"]:
    r"""$x^\top y$; on one torch thread through numpy's BLAS (OpenBLAS: 10% faster than ``torch.mm`` on
    ``(1008, 384)`` float32 operands on this project's CPU machine)."""
    if not _numpy_blas(x, y):
        return x.T @ y
    return torch.from_numpy(x.contiguous().numpy().T @ y.contiguous().numpy())


def centre(
    x: Float[Tensor, "*token dim"],
) -> tuple[Float[Tensor, "token dim"], Float[Tensor, " dim"], Float[Tensor, " dim"]]:
    """Two-pass centring: $x_c = x - m$ with $m$ the mean in the dtype of $x$, then the residual mean
    $r = \\bar x_c$ (float64) and the exact mean $\\mu = m + r$ (float64). Products of centred data
    are corrected exactly, $\\sum_t (x_t-\\mu)(y_t-\\nu)^\\top = x_c^\\top y_c - n\\, r_x r_y^\\top$, and stay
    accurate in float32 because $x_c$ is small. (A float64 reduction of a float32 tensor is ~15x slower.)

    Half-precision ``x`` is centred in float32. ``x`` may have several token axes (a strided view such as
    ``h[:, 1:]`` is read in place); the centred copy is flattened to ``(token, dim)``. Returns ``(x_c, mu, r)``:
    ``(token, dim)``, ``(dim,)``, ``(dim,)``.

    Speed (torch 2.13 on CPU, a ``(16, 126, 384)`` view): the token axes are summed one at a time (one
    reduction over two strided axes takes 12x longer), and ``m`` is subtracted with the same number of
    axes as ``x`` (a ``(D,)`` operand against a strided view takes 4x longer).
    """
    if x.dtype in (torch.float16, torch.bfloat16):
        x = x.float()
    m = x
    for _ in range(x.ndim - 1):
        m = m.sum(-2)
    m = m / (x.numel() // x.shape[-1])
    xc = (x - m.view((1,) * (x.ndim - 1) + (-1,))).view(-1, x.shape[-1])
    r = xc.mean(0).double()
    return xc, m.double() + r, r


Central = tuple[Tensor, Tensor, Tensor, Tensor]  # mean and central power sums M_2, M_3, M_4, elementwise


def merge_central(na: int, a: Central, nb: int, b: Central) -> Central:
    r"""Mean and central power sums $M_k = \sum (y - \bar y)^k$ ($k = 2, 3, 4$) of two disjoint sets of $n_a, n_b > 0$
    values from each set's (Pebay 2008; Chan et al. 1979 for $M_2$), with $\delta = \bar y_b - \bar y_a$,
    $n = n_a + n_b$:

    $$M_2 = M_{2a} + M_{2b} + \delta^2 \tfrac{n_a n_b}{n},\qquad
    M_3 = M_{3a} + M_{3b} + \delta^3 \tfrac{n_a n_b (n_a - n_b)}{n^2} + 3\delta \tfrac{n_a M_{2b} - n_b M_{2a}}{n},$$
    $$M_4 = M_{4a} + M_{4b} + \delta^4 \tfrac{n_a n_b (n_a^2 - n_a n_b + n_b^2)}{n^3}
    + 6\delta^2 \tfrac{n_a^2 M_{2b} + n_b^2 M_{2a}}{n^2} + 4\delta \tfrac{n_a M_{3b} - n_b M_{3a}}{n}.$$

    ``a``, ``b``: ``(mean, M_2, M_3, M_4)``, tensors of one shape (elementwise: per direction or per channel)."""
    (mean_a, a2, a3, a4), (mean_b, b2, b3, b4) = a, b
    n = na + nb
    d = mean_b - mean_a
    m4 = (a4 + b4 + d**4 * na * nb * (na * na - na * nb + nb * nb) / n**3
          + 6 * d**2 * (na * na * b2 + nb * nb * a2) / n**2 + 4 * d * (na * b3 - nb * a3) / n)
    m3 = a3 + b3 + d**3 * na * nb * (na - nb) / n**2 + 3 * d * (na * b2 - nb * a2) / n
    return mean_a + d * (nb / n), a2 + b2 + d**2 * na * nb / n, m3, m4


def central_from_raw(
    m1: Float[Tensor, "*shape"], m2: Float[Tensor, "*shape"], m3: Float[Tensor, "*shape"], m4: Float[Tensor, "*shape"]
) -> tuple[Float[Tensor, "*shape"], Float[Tensor, "*shape"], Float[Tensor, "*shape"]]:
    r"""Central moments of orders 2, 3, 4 from the raw moments $m_k = E y^k$ (elementwise):

    $$\mu_2 = m_2 - m_1^2,\quad \mu_3 = m_3 - 3 m_1 m_2 + 2 m_1^3,\quad
    \mu_4 = m_4 - 4 m_1 m_3 + 6 m_1^2 m_2 - 3 m_1^4.$$

    The terms cancel to relative precision $\epsilon\,(|m_1| / \sqrt{\mu_2})^4$: the raw moments should be of
    values shifted near their mean (``ChannelMoments.shift_``)."""
    return m2 - m1**2, m3 - 3 * m1 * m2 + 2 * m1**3, m4 - 4 * m1 * m3 + 6 * m1**2 * m2 - 3 * m1**4


class Moments:
    """Count, mean, optional covariance and projected higher moments of a stream of vectors.

    Args:
        dim: vector dimension D.
        covariance: keep the ``(D, D)`` scatter matrix.
        directions: ``(D, K)`` fixed projection directions for skewness/kurtosis, or None.
        dtype: of the scatter matrix, ``torch.float64`` or ``torch.float32`` (half the memory; see the
            module docstring).

    Fitted attributes: ``n_``, ``mean_`` (D,), ``scatter_`` (D, D), ``proj_mean_`` (K,),
    ``proj_m2_``, ``proj_m3_``, ``proj_m4_`` (K,) central power sums.
    """

    def __init__(self, dim: int, covariance: bool = True, directions: Float[Tensor, "dim k"] | None = None,
                 dtype: torch.dtype = torch.float64):
        positive_int("dim", dim)
        if directions is not None and directions.shape[0] != dim:
            raise ValueError(f"directions must have shape ({dim}, K), got {tuple(directions.shape)}")
        self.dim = dim
        self.dtype = accumulator_dtype(dtype)
        self.directions = None if directions is None else directions.double()
        self.n_ = 0
        self.mean_ = torch.zeros(dim, dtype=torch.float64)
        self.scatter_ = torch.zeros(dim, dim, dtype=dtype) if covariance else None
        k = 0 if directions is None else directions.shape[1]
        self.proj_mean_ = torch.zeros(k, dtype=torch.float64)
        self.proj_m2_, self.proj_m3_, self.proj_m4_ = (torch.zeros(k, dtype=torch.float64) for _ in range(3))

    @classmethod
    def of(
        cls,
        x: Float[Tensor, "*token dim"],
        covariance: bool = True,
        directions: Float[Tensor, "dim k"] | None = None,
        projections: Float[Tensor, "*token k"] | None = None,
    ) -> Moments:
        """The statistics of one batch of vectors (any float dtype; the scatter is a float32/float64
        product of data centred on the batch mean, so it stays accurate). ``x`` is ``(..., D)``: every
        leading index is a token. ``directions`` as in the constructor; ``projections`` = ``x @ directions``
        when the caller has it already. Several accumulators may merge the same batch ``Moments``.

        Raises:
            ValueError: ``x`` not ``(..., D)`` with ``D`` matching ``directions``, or not finite.
        """
        if x.ndim < 2 or (directions is not None and x.shape[-1] != directions.shape[0]):
            raise ValueError(f"x must have shape (..., dim) matching the directions, got {tuple(x.shape)}")
        if x.numel() == 0:
            return cls(x.shape[-1], covariance, directions)
        batch = cls(x.shape[-1], False, directions)  # the scatter is set below: no zero-filled placeholder
        xc, batch.mean_, r = centre(x)
        n = batch.n_ = xc.shape[0]
        # a NaN or infinity anywhere in x reaches the mean: checked now on the CPU; on an accelerator (no host
        # synchronisation per batch) it reaches the running mean, which the read-outs check (``_finite``)
        if x.device.type == "cpu" and not torch.isfinite(batch.mean_).all():
            raise ValueError("x holds NaN or infinity")
        if covariance:
            batch.scatter_ = gram(xc).double().addr_(r, r, alpha=-n)
        if batch.directions is not None:
            xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
            y = xf @ batch.directions.to(x.device, xf.dtype) if projections is None else projections
            y = y.reshape(-1, y.shape[-1]).double()  # (N, K); float32 projections, float64 moments
            batch.proj_mean_ = y.mean(0)
            c = y - batch.proj_mean_
            c2 = c * c
            batch.proj_m2_, batch.proj_m3_, batch.proj_m4_ = c2.sum(0), (c2 * c).sum(0), (c2 * c2).sum(0)
        return batch

    def update(self, x: Float[Tensor, "token dim"]) -> Moments:
        """Add a batch of vectors (any float dtype): ``merge(Moments.of(x, ...))``."""
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"x must have shape (token, {self.dim}), got {tuple(x.shape)}")
        return self.merge(Moments.of(x, self.scatter_ is not None, self.directions))

    def merge(self, other: Moments) -> Moments:
        """Combine with the statistics of another, disjoint set of vectors (in place)."""
        na, nb = self.n_, other.n_
        if nb == 0:
            return self
        if na == 0:
            self.directions = None if self.directions is None else self.directions.to(other.mean_.device)
            self.n_, self.mean_ = nb, other.mean_.clone()
            self.scatter_ = None if self.scatter_ is None else other.scatter_.to(dtype=self.dtype, copy=True)
            if self.directions is not None:
                self.proj_mean_ = other.proj_mean_.clone()
                self.proj_m2_, self.proj_m3_, self.proj_m4_ = (
                    t.clone() for t in (other.proj_m2_, other.proj_m3_, other.proj_m4_)
                )
            return self
        n = na + nb
        delta = other.mean_.to(self.mean_.device) - self.mean_
        self.mean_ = self.mean_ + delta * (nb / n)
        if self.scatter_ is not None:  # in place: the accumulator is this object's own tensor
            d = delta.to(self.dtype)
            self.scatter_.add_(other.scatter_.to(self.scatter_.device, self.dtype)).addr_(d, d, alpha=na * nb / n)
        if self.directions is not None:
            dev = self.proj_mean_.device
            other_sums = (t.to(dev) for t in (other.proj_mean_, other.proj_m2_, other.proj_m3_, other.proj_m4_))
            self.proj_mean_, self.proj_m2_, self.proj_m3_, self.proj_m4_ = merge_central(
                na, (self.proj_mean_, self.proj_m2_, self.proj_m3_, self.proj_m4_), nb, tuple(other_sums))
        self.n_ = n
        return self

    def _finite(self) -> None:
        """ValueError if a vector added on an accelerator held NaN or infinity (``of`` checks CPU data at once)."""
        if self.mean_.device.type != "cpu" and not bool(torch.isfinite(self.mean_).all()):
            raise ValueError("x holds NaN or infinity")

    @property
    def covariance_(self) -> Float[Tensor, "dim dim"]:
        """Sample covariance $M_2 / (n - 1)$, ``(D, D)`` float64 (whatever the dtype of the scatter)."""
        if self.scatter_ is None or self.n_ < 2:
            raise ValueError(f"covariance needs covariance=True and at least 2 vectors, got n={self.n_}")
        self._finite()
        return self.scatter_.double() / (self.n_ - 1)

    def skewness_(self) -> Float[Tensor, " k"]:
        """Sample skewness $\\sqrt{n} M_3 / M_2^{3/2}$ along each direction, ``(K,)``."""
        self._finite()
        return self.n_**0.5 * self.proj_m3_ / self.proj_m2_**1.5

    def excess_kurtosis_(self, check: bool = True) -> Float[Tensor, " k"]:
        """Sample excess kurtosis $n M_4 / M_2^2 - 3$ along each direction, ``(K,)``. ``check``: on an accelerator,
        read whether the mean is finite (a host read; ``False`` where the caller checks other sums of the data)."""
        if check:
            self._finite()
        return self.n_ * self.proj_m4_ / self.proj_m2_**2 - 3.0


def covariance_stack(moments: list[Moments]) -> Float[Tensor, "batch dim dim"]:
    """The sample covariances $M_2 / (n - 1)$ of ``moments`` stacked, ``(batch, D, D)`` float64, without
    ``covariance_``'s finiteness check (a host read per matrix on an accelerator): a caller reads another statistic
    of the same data that carries any NaN or infinity (E3's bootstrap sums, checked by ``BootstrapMeans.interval``).

    Raises:
        ValueError: one of them without its scatter or with fewer than 2 vectors.
    """
    for m in moments:
        if m.scatter_ is None or m.n_ < 2:
            raise ValueError(f"covariance needs covariance=True and at least 2 vectors, got n={m.n_}")
    return torch.stack([m.scatter_.double() / (m.n_ - 1) for m in moments])


def poisson_weights(seed: int, index: Int[Tensor, " seq"], replicates: int) -> Float[Tensor, "seq replicate"]:
    """Poisson(1) bootstrap weights ``(len(index), replicates)``, one seeded stream per sequence index ``(seq,)``."""
    rows = [np.random.default_rng([seed, 7919, int(i)]).poisson(1.0, replicates) for i in index.tolist()]
    return torch.as_tensor(np.stack(rows), dtype=torch.float64)


class BootstrapMeans:
    """Means of per-sequence feature vectors, with Poisson-bootstrap replicates of the same means.

    Args:
        features: F, the length of each sequence's vector.
        replicates: R, number of bootstrap replicates.

    Fitted attributes: ``n_`` (sequences), ``sum_`` (F,), ``rep_sum_`` (R, F), ``rep_weight_`` (R,).
    """

    def __init__(self, features: int, replicates: int):
        if features < 1 or replicates < 2:
            raise ValueError(f"need features >= 1 and replicates >= 2, got {features}, {replicates}")
        self.n_ = 0
        self.sum_ = torch.zeros(features, dtype=torch.float64)
        self.rep_sum_ = torch.zeros(replicates, features, dtype=torch.float64)
        self.rep_weight_ = torch.zeros(replicates, dtype=torch.float64)

    def update(self, values: Float[Tensor, "seq feature"], weights: Float[Tensor, "seq replicate"]) -> BootstrapMeans:
        """Add sequences' values with their bootstrap weights (from ``poisson_weights``)."""
        if self.n_ == 0:  # the accumulators move to the data's device
            self.sum_, self.rep_sum_, self.rep_weight_ = (
                t.to(values.device) for t in (self.sum_, self.rep_sum_, self.rep_weight_)
            )
        values = values.double().to(self.sum_.device)
        weights = weights.to(self.sum_.device, torch.float64)
        if (
            values.ndim != 2
            or values.shape[1] != self.sum_.shape[0]
            or weights.shape != (values.shape[0], self.rep_weight_.shape[0])
        ):
            raise ValueError(
                f"values must be (seq, {self.sum_.shape[0]}) and weights (seq, {self.rep_weight_.shape[0]}); "
                f"got {tuple(values.shape)} and {tuple(weights.shape)}"
            )
        if values.device.type == "cpu" and not torch.isfinite(values).all():  # on a device: checked by interval
            raise ValueError("values hold NaN or infinity")
        self.n_ += values.shape[0]
        self.sum_ += values.sum(0)
        self.rep_sum_ += weights.T @ values
        self.rep_weight_ += weights.sum(0)
        return self

    def merge(self, other: BootstrapMeans) -> BootstrapMeans:
        self.n_ += other.n_
        self.sum_ += other.sum_.to(self.sum_.device)
        self.rep_sum_ += other.rep_sum_.to(self.sum_.device)
        self.rep_weight_ += other.rep_weight_.to(self.sum_.device)
        return self

    def mean_(self) -> Float[Tensor, " feature"]:
        """The mean of the sequences' vectors, ``(F,)``."""
        return self.sum_ / self.n_

    def interval(self, statistic: Callable[[Tensor], Tensor], level: float = 0.95,
                 check: bool = True) -> tuple[Tensor, Tensor, Tensor]:
        """``statistic(mean)`` and its percentile interval over the replicates.

        ``statistic`` maps a ``(..., F)`` batch of mean vectors to ``(..., *out)``.
        Returns (estimate, low, high), each of the statistic's output shape. ``check``: on an accelerator, read
        whether the sums are finite (a host read; ``False`` where the caller checks other sums of the same data).
        """
        if self.n_ == 0:
            raise ValueError("no sequences were added")
        if check and self.sum_.device.type != "cpu" and not bool(torch.isfinite(self.sum_).all()):  # NaN/inf
            raise ValueError("values hold NaN or infinity")
        estimate = statistic(self.mean_().unsqueeze(0))[0]
        reps = self.replicates(statistic)
        alpha = (1 - level) / 2
        low, high = torch.quantile(reps, torch.tensor([alpha, 1 - alpha], dtype=reps.dtype, device=reps.device), dim=0)
        return estimate, low, high

    def replicates(self, statistic: Callable[[Tensor], Tensor]) -> Float[Tensor, " replicate *out"]:
        """``statistic`` of each replicate's mean, ``(R', *out)`` over the ``R'`` replicates that drew any sequence
        (the sample ``interval`` takes its percentiles of; a count over units has its interval from it too)."""
        keep = self.rep_weight_ > 0
        return statistic(self.rep_sum_[keep] / self.rep_weight_[keep, None])

