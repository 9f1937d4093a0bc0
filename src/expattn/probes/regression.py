r"""Streaming, mergeable sufficient statistics of an affine regression $y \approx W^\top x + b$ (E6's fits).

The same merging and precision rules as ``expattn.probes.stats`` (Chan's update of centred sums; ``dtype`` of the
``(D, D)`` and ``(D, E)`` accumulators float64 or float32, read-outs in float64).
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float
from torch import Tensor

from expattn.probes.stats import accumulator_dtype, centre, cross, gram


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
        if na == 0:  # the accumulators move to the data's device
            for name in ("mean_x_", "mean_y_", "sxx_", "sxy_", "syy_"):
                setattr(self, name, getattr(self, name).to(other.sxx_.device))
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

    def ridge(self, relative: float) -> tuple[Tensor, Tensor, float]:
        """Ridge fit on these statistics: $W = (S_{xx} + \\lambda I)^{-1} S_{xy}$, $b = \\bar y - W^\\top \\bar x$,
        $\\lambda = $ ``relative`` $\\cdot \\operatorname{tr} S_{xx} / D$. Returns (W, b, lambda)."""
        sxx = self.sxx_.double()
        lam = relative * float(torch.diagonal(sxx).mean())
        eye = torch.eye(sxx.shape[0], dtype=torch.float64, device=sxx.device)
        w = torch.linalg.solve(sxx + lam * eye, self.sxy_.double())
        return w, self.mean_y_ - w.T @ self.mean_x_, lam

    def ridge_path(self, relatives: tuple[float, ...], blocks: tuple[slice, ...] = (slice(None),)
                   ) -> list[list[tuple[Tensor, Tensor, float, float]]]:
        r"""Ridge fits for every ``relatives`` from one eigendecomposition $S_{xx} = Q \operatorname{diag}(e) Q^\top$:
        $W_\lambda = Q \operatorname{diag}(1/(e + \lambda)) Q^\top S_{xy}$, each with its generalised
        cross-validation score on these statistics (Golub, Heath and Wahba 1979),

        $$\mathrm{GCV}(\lambda) = \frac{\mathrm{RSS}(\lambda)/n}{(1 - \mathrm{df}(\lambda)/n)^2},\qquad
        \mathrm{df}(\lambda) = 1 + \sum_i \frac{e_i}{e_i + \lambda}$$

        (the 1: the intercept), with the fit's own residual read off the eigenbasis: with $b = \bar y - W^\top \bar x$
        and $g_i^2 = \sum_c (Q^\top S_{xy})_{ic}^2$,
        $\mathrm{RSS}(\lambda) = \operatorname{tr} S_{yy} - \sum_i g_i^2 (2/(e_i + \lambda) - e_i/(e_i + \lambda)^2)$
        ($O(D)$ per ridge, no $S_{xx} W$ product). Returns, per block of columns of $y$ (``blocks``; one
        eigendecomposition for all), ``[(W, b, lambda, gcv)]`` in the order of ``relatives``."""
        sxx = self.sxx_.double()
        e, q = torch.linalg.eigh(sxx)
        e = e.clamp_min(0)
        g = q.T @ self.sxy_.double()
        paths = []
        for block in blocks:
            out = []
            g2 = g[:, block].pow(2).sum(1)
            for relative in relatives:
                lam = relative * float(torch.diagonal(sxx).mean())
                w = q @ (g[:, block] / (e + lam)[:, None])
                b = self.mean_y_[block] - w.T @ self.mean_x_
                rss = float(self.syy_[block].sum() - (g2 * (2 / (e + lam) - e / (e + lam) ** 2)).sum())
                df = 1 + float((e / (e + lam)).sum())
                room = 1 - df / self.n_
                out.append((w, b, lam, rss / self.n_ / room**2 if room > 0 else math.inf))
            paths.append(out)
        return paths

    def r_squared(self, w: Tensor, b: Tensor, block: slice = slice(None)) -> float:
        """$1 - \\sum\\lVert y - W^\\top x - b\\rVert^2 / \\sum\\lVert y - \\bar y\\rVert^2$ on the data of
        these statistics, for the columns ``block`` of $y$."""
        offset = self.mean_y_[block] - w.T @ self.mean_x_ - b
        sxx, sxy, syy = self.sxx_.double(), self.sxy_[:, block].double(), self.syy_[block].sum()
        resid = syy - 2 * (w * sxy).sum() + (w * (sxx @ w)).sum() + self.n_ * offset.pow(2).sum()
        return float(1 - resid / syy)
