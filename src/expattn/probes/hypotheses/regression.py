r"""Streaming, mergeable sufficient statistics of an affine regression $y \approx W^\top x + b$ (E6's fits).

The same merging and precision rules as ``statistics.stats`` (Chan's update of centred sums; ``dtype`` of the
``(D, D)`` and ``(D, E)`` accumulators float64 or float32, read-outs in float64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.statistics.stats import accumulator_dtype, centre, cross, gram


class CrossMoments:
    """Sufficient statistics of an affine regression $y \\approx W^\\top x + b$, mergeable.

    Keeps $n$, means of $x$ (D) and $y$ (E), $S_{xx}$ (D, D), $S_{xy}$ (D, E) and the diagonal of
    $S_{yy}$ (E), all centred, merged with Chan's update
    $S_{xy} = S_{xy,a} + S_{xy,b} + \\delta_x \\delta_y^\\top n_a n_b / n$. ``dtype``: of $S_{xx}$ and
    $S_{xy}$, ``torch.float64`` or ``torch.float32`` (half the memory; see the module docstring).
    Several responses regressed on the same $x$ are one ``CrossMoments`` with their columns side by side: the fits
    and scores take a ``block`` of columns, and every block shares $S_{xx}$ and its eigendecomposition.
    """

    def __init__(self, dim_x: int, dim_y: int, dtype: torch.dtype = torch.float64):
        self.n_ = 0
        self.mean_x_ = torch.zeros(dim_x, dtype=torch.float64)
        self.mean_y_ = torch.zeros(dim_y, dtype=torch.float64)
        self.sxx_ = torch.zeros(dim_x, dim_x, dtype=accumulator_dtype(dtype))
        self.sxy_ = torch.zeros(dim_x, dim_y, dtype=dtype)
        self.syy_ = torch.zeros(dim_y, dtype=torch.float64)

    def update(self, x: Float[Tensor, "*token dx"], y: Float[Tensor, "*token dy"]) -> CrossMoments:
        """Add paired vectors; every leading index of ``x`` ``(..., dx)`` and ``y`` ``(..., dy)`` is a token."""
        if x.ndim < 2 or x.shape[:-1] != y.shape[:-1]:
            raise ValueError(
                f"x and y must be (..., dim) with equal token axes, got {tuple(x.shape)}, {tuple(y.shape)}"
            )
        if x.numel() == 0:
            return self
        other = CrossMoments.__new__(CrossMoments)
        (xc, other.mean_x_, rx), (yc, other.mean_y_, ry) = centre(x), centre(y)
        n = other.n_ = xc.shape[0]
        other.sxx_ = gram(xc).double().addr_(rx, rx, alpha=-n)
        other.sxy_ = cross(xc, yc).double().addr_(rx, ry, alpha=-n)
        other.syy_ = torch.linalg.vector_norm(yc, dim=0).double().square() - n * ry.pow(2)
        return self.merge(other)

    def merge(self, other: CrossMoments) -> CrossMoments:
        na, nb = self.n_, other.n_
        if nb == 0:
            return self
        n = na + nb
        if na == 0:  # the other's statistics, in this one's dtypes, where they live (no zeros copied to a GPU)
            for name in ("mean_x_", "mean_y_", "sxx_", "sxy_", "syy_"):
                setattr(self, name, getattr(other, name).to(dtype=getattr(self, name).dtype, copy=True))
            self.n_ = nb
            return self
        dx, dy = other.mean_x_.to(self.sxx_.device) - self.mean_x_, other.mean_y_.to(self.sxx_.device) - self.mean_y_
        f = na * nb / n
        dev, dtype = self.sxx_.device, self.sxx_.dtype
        # in place: the accumulators are this object's own
        self.sxx_.add_(other.sxx_.to(dev, dtype)).addr_(dx.to(dtype), dx.to(dtype), alpha=f)
        self.sxy_.add_(other.sxy_.to(dev, dtype)).addr_(dx.to(dtype), dy.to(dtype), alpha=f)
        self.syy_ = self.syy_ + other.syy_.to(dev) + dy.pow(2) * f
        self.mean_x_ = self.mean_x_ + dx * (nb / n)
        self.mean_y_ = self.mean_y_ + dy * (nb / n)
        self.n_ = n
        return self

    def ridge(self, relative: float) -> tuple[Float[Tensor, "dx dy"], Float[Tensor, " dy"], float]:
        """Ridge fit on these statistics: $W = (S_{xx} + \\lambda I)^{-1} S_{xy}$, $b = \\bar y - W^\\top \\bar x$,
        $\\lambda = $ ``relative`` $\\cdot \\operatorname{tr} S_{xx} / D$. Returns (W, b, lambda): ``(dx, dy)``,
        ``(dy,)``, a float."""
        sxx = self.sxx_.double()
        lam = relative * float(torch.diagonal(sxx).mean())
        eye = torch.eye(sxx.shape[0], dtype=torch.float64, device=sxx.device)
        w = torch.linalg.solve(sxx + lam * eye, self.sxy_.double())
        return w, self.mean_y_ - w.T @ self.mean_x_, lam

    def ridge_path(self, relatives: tuple[float, ...]) -> RidgePath:
        """Ridge fits on these statistics for every ``relatives`` (as ``ridge``), from one eigendecomposition of
        $S_{xx}$ (``RidgePath``)."""
        sxx = self.sxx_.double()
        e, q = torch.linalg.eigh(sxx)
        scale = float(torch.diagonal(sxx).mean())
        return RidgePath(self, q, e.clamp_min(0), q.T @ self.sxy_.double(), [r * scale for r in relatives])

    def r_squared(self, w: Float[Tensor, "dx block"], b: Float[Tensor, " block"], block: slice = slice(None)) -> float:
        """$1 - \\sum\\lVert y - W^\\top x - b\\rVert^2 / \\sum\\lVert y - \\bar y\\rVert^2$ on the data of
        these statistics, for the columns ``block`` of $y$: ``w`` ``(dx, block)``, ``b`` ``(block,)``."""
        offset = self.mean_y_[block] - w.T @ self.mean_x_ - b
        sxx, sxy, syy = self.sxx_.double(), self.sxy_[:, block].double(), self.syy_[block].sum()
        resid = syy - 2 * (w * sxy).sum() + (w * (sxx @ w)).sum() + self.n_ * offset.pow(2).sum()
        return float(1 - resid / syy)


@dataclass(frozen=True)
class RidgePath:
    r"""Ridge fits $W_\lambda = Q \operatorname{diag}(1/(e + \lambda)) G$, $b_\lambda = \bar y - W_\lambda^\top \bar x$
    over a grid of $\lambda$, kept as the eigendecomposition $S_{xx} = Q \operatorname{diag}(e) Q^\top$ of the fit's
    statistics and $G = Q^\top S_{xy}$: nothing of size $D \times E$ is formed per $\lambda$.

    Attributes: ``fit`` (the ``CrossMoments`` fitted), ``q`` ``(D, D)``, ``e`` ``(D,)`` (clipped at 0),
    ``g`` ``(D, E)``, ``lams`` (the ridges $\lambda$, absolute).
    """

    fit: CrossMoments
    q: Float[Tensor, "dx dx"]
    e: Float[Tensor, " dx"]
    g: Float[Tensor, "dx dy"]
    lams: list[float]

    def gcv(self, block: slice = slice(None)) -> list[float]:
        r"""Generalised cross-validation score of each ridge on the fit's own statistics (Golub, Heath and Wahba
        1979), for the columns ``block`` of $y$:

        $$\mathrm{GCV}(\lambda) = \frac{\mathrm{RSS}(\lambda)/n}{(1 - \mathrm{df}(\lambda)/n)^2},\qquad
        \mathrm{df}(\lambda) = 1 + \sum_i \frac{e_i}{e_i + \lambda}$$

        (the 1: the intercept), with the residual read off the eigenbasis, $g_i^2 = \sum_c G_{ic}^2$:
        $\mathrm{RSS}(\lambda) = \operatorname{tr} S_{yy} - \sum_i g_i^2 (2/(e_i + \lambda) - e_i/(e_i+\lambda)^2)$."""
        e, n = self.e, self.fit.n_
        g2 = self.g[:, block].pow(2).sum(1)
        scores = []
        for lam in self.lams:
            rss = float(self.fit.syy_[block].sum() - (g2 * (2 / (e + lam) - e / (e + lam) ** 2)).sum())
            room = 1 - (1 + float((e / (e + lam)).sum())) / n
            scores.append(rss / n / room**2 if room > 0 else math.inf)
        return scores

    def weights(self, k: int, block: slice = slice(None)) -> tuple[Float[Tensor, "dx block"], Float[Tensor, " block"]]:
        """$(W, b)$ of the ``k``-th ridge for the columns ``block``, formed: ``(dx, block)`` and ``(block,)``."""
        w = self.q @ (self.g[:, block] / (self.e + self.lams[k])[:, None])
        return w, self.fit.mean_y_[block] - w.T @ self.fit.mean_x_

    def r_squared(self, other: CrossMoments, blocks: tuple[slice, ...] = (slice(None),)) -> list[list[float]]:
        r"""Held-out $R^2$ of every ridge on ``other``'s statistics (as ``CrossMoments.r_squared`` of the formed fit),
        per block of columns of $y$ (``blocks``), without forming $W$: with $d = 1/(e + \lambda)$,
        $H = Q^\top S'_{xy}$, $M = Q^\top S'_{xx} Q$ (one for all blocks) and $C = G G^\top$ (primes: ``other``'s
        statistics, a block's columns),

        $$\operatorname{tr} W^\top S'_{xy} = \sum_i d_i (G \odot H)_{i\cdot}\mathbf 1,\qquad
        \operatorname{tr} W^\top S'_{xx} W = d^\top (M \odot C)\, d,$$

        and the offset of the means $\Delta\bar y - G^\top (d \odot Q^\top \Delta\bar x)$: $O(D^2)$ per ridge after
        the $D^3$ products."""
        m = self.q.T @ other.sxx_.double() @ self.q
        u = self.q.T @ (other.mean_x_ - self.fit.mean_x_)
        scores = []
        for block in blocks:
            g = self.g[:, block]
            h = (g * (self.q.T @ other.sxy_[:, block].double())).sum(1)
            k = m * (g @ g.T)
            dy = other.mean_y_[block] - self.fit.mean_y_[block]
            syy = other.syy_[block].sum()
            out = []
            for lam in self.lams:
                d = 1 / (self.e + lam)
                offset = dy - g.T @ (d * u)
                resid = syy - 2 * (d * h).sum() + d @ k @ d + other.n_ * offset.pow(2).sum()
                out.append(float(1 - resid / syy))
            scores.append(out)
        return scores
