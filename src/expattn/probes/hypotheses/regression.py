r"""Streaming, mergeable sufficient statistics of an affine regression $y \approx W^\top x + b$ (E6's fits).

The same merging and precision rules as ``statistics.stats`` (Chan's update of centred sums; ``dtype`` of the
``(D, D)`` and ``(D, E)`` accumulators float64 or float32, read-outs in float64).
"""

from __future__ import annotations

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

    def ridge_path(self, relatives: tuple[float, ...], dtype: torch.dtype = torch.float64) -> RidgePath:
        """Ridge fits on these statistics for every ``relatives`` (as ``ridge``), from one eigendecomposition of
        $S_{xx}$ (``RidgePath``), computed in ``dtype``."""
        return RidgePath.of(self, relatives, dtype)

    @classmethod
    def stack(cls, moments: list[list[CrossMoments]]) -> CrossMoments:
        """Statistics of one shape stacked along two new leading axes (rows, columns of ``moments``: layers and
        folds): ``n_`` ``(rows, columns)`` float64 and every accumulator ``(rows, columns, ...)``, float64, on the
        first one's device (read by ``held_out`` and ``RidgePath``)."""
        out = cls.__new__(cls)
        flat = [m for row in moments for m in row]
        dev, shape = flat[0].sxx_.device, (len(moments), len(moments[0]))
        out.n_ = torch.tensor([float(m.n_) for m in flat], dtype=torch.float64, device=dev).view(shape)
        for name in ("mean_x_", "mean_y_", "sxx_", "sxy_", "syy_"):
            stacked = torch.stack([getattr(m, name).to(dev, torch.float64) for m in flat])
            setattr(out, name, stacked.view(*shape, *stacked.shape[1:]))
        return out

    def held_out(self) -> CrossMoments:
        r"""For stacked folds (``stack``, fold axis last of the batch: ``n_`` ``(..., K)``), the statistics of every
        fold's complement, the other $K - 1$ folds merged (the same shapes): with $\bar x_{-k}$ their mean,

        $$S_{xy,-k} = \sum_{j \ne k} S_{xy,j}
        + \sum_{j\ne k} n_j (\bar x_j - \bar x_{-k})(\bar y_j - \bar y_{-k})^\top,$$

        Chan's merge in one step: every term is central, as the sequential merges' are."""
        n, total = self.n_, self.n_.sum(-1, keepdim=True)  # (..., K), (..., 1)
        rest = total - n
        others = n.unsqueeze(-2) * (1 - torch.eye(n.shape[-1], dtype=n.dtype, device=n.device))  # (..., k, j)
        out = CrossMoments.__new__(CrossMoments)
        out.n_ = rest
        means = []
        for name in ("mean_x_", "mean_y_"):
            mean = getattr(self, name)  # (..., K, D)
            rest_mean = (others @ mean) / rest.unsqueeze(-1)  # (..., K, D)
            setattr(out, name, rest_mean)
            means.append(mean.unsqueeze(-3) - rest_mean.unsqueeze(-2))  # (..., k, j, D): fold j from complement k
        (dx, dy), w = means, others.unsqueeze(-1)
        out.sxx_ = self.sxx_.sum(-3, keepdim=True) - self.sxx_ + (w * dx).mT @ dx
        out.sxy_ = self.sxy_.sum(-3, keepdim=True) - self.sxy_ + (w * dx).mT @ dy
        out.syy_ = self.syy_.sum(-2, keepdim=True) - self.syy_ + (w * dy * dy).sum(-2)
        return out

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
    statistics and $G = Q^\top S_{xy}$: nothing of size $D \times E$ is formed per $\lambda$. Every tensor may carry
    leading batch axes (``CrossMoments.stack``: one fit per layer and fold, decomposed in one batched call).

    Attributes: ``fit`` (the ``CrossMoments`` fitted), ``q`` ``(*batch, D, D)``, ``e`` ``(*batch, D)`` (clipped at 0),
    ``g`` ``(*batch, D, E)`` (all in the path's dtype), ``lams`` ``(*batch, grid)`` (the ridges $\lambda$, absolute,
    float64).
    """

    fit: CrossMoments
    q: Float[Tensor, "*batch dx dx"]
    e: Float[Tensor, "*batch dx"]
    g: Float[Tensor, "*batch dx dy"]
    lams: Float[Tensor, "*batch grid"]

    @classmethod
    def of(cls, fit: CrossMoments, relatives: tuple[float, ...], dtype: torch.dtype = torch.float64) -> RidgePath:
        r"""The path of ``fit``'s statistics over ``relatives`` $\cdot \operatorname{tr} S_{xx} / D$; the
        eigendecomposition and the products in ``dtype`` (float64, or float32: see ``e6_mlp``'s precision note)."""
        sxx = fit.sxx_.to(dtype)
        e, q = torch.linalg.eigh(sxx)
        scale = torch.diagonal(fit.sxx_, dim1=-2, dim2=-1).double().mean(-1, keepdim=True)  # (*batch, 1)
        lams = scale * torch.tensor(relatives, dtype=torch.float64, device=scale.device)
        return cls(fit, q, e.clamp_min(0), q.mT @ fit.sxy_.to(dtype), lams)

    def _inverse(self) -> tuple[Tensor, Tensor]:
        r"""$e$ ``(*batch, 1, D)`` and $d = 1/(e + \lambda)$ ``(*batch, grid, D)``, float64."""
        e = self.e.double().unsqueeze(-2)
        return e, 1 / (e + self.lams.unsqueeze(-1))

    def gcv(self, block: slice = slice(None)) -> Float[Tensor, "*batch grid"]:
        r"""Generalised cross-validation score of each ridge on the fit's own statistics (Golub, Heath and Wahba
        1979), for the columns ``block`` of $y$, ``(*batch, grid)`` float64:

        $$\mathrm{GCV}(\lambda) = \frac{\mathrm{RSS}(\lambda)/n}{(1 - \mathrm{df}(\lambda)/n)^2},\qquad
        \mathrm{df}(\lambda) = 1 + \sum_i \frac{e_i}{e_i + \lambda}$$

        (the 1: the intercept; infinite where $\mathrm{df} \ge n$), with the residual read off the eigenbasis,
        $g_i^2 = \sum_c G_{ic}^2$ and $d_i = 1/(e_i + \lambda)$:
        $\mathrm{RSS}(\lambda) = \operatorname{tr} S_{yy} - \sum_i g_i^2 (2 d_i - e_i d_i^2)$."""
        e, d = self._inverse()
        n = torch.as_tensor(self.fit.n_, dtype=torch.float64, device=e.device).unsqueeze(-1)  # (*batch, 1)
        g2 = self.g[..., block].double().pow(2).sum(-1).unsqueeze(-2)  # (*batch, 1, D)
        rss = self.fit.syy_[..., block].sum(-1, keepdim=True) - (g2 * (2 * d - e * d * d)).sum(-1)
        room = 1 - (1 + (e * d).sum(-1)) / n
        return torch.where(room > 0, rss / n / room.clamp_min(1e-300) ** 2, torch.inf)

    def weights(self, k: int, block: slice = slice(None)) -> tuple[Float[Tensor, "dx block"], Float[Tensor, " block"]]:
        """$(W, b)$ of the ``k``-th ridge for the columns ``block`` of an unbatched path, formed: ``(dx, block)``
        and ``(block,)``, float64."""
        w = self.q.double() @ (self.g[:, block].double() / (self.e.double() + self.lams[k])[:, None])
        return w, self.fit.mean_y_[block] - w.T @ self.fit.mean_x_

    def r_squared(self, other: CrossMoments, blocks: tuple[slice, ...] = (slice(None),)
                  ) -> Float[Tensor, "*batch block grid"]:
        r"""Held-out $R^2$ of every ridge on ``other``'s statistics (as ``CrossMoments.r_squared`` of the formed fit),
        per block of columns of $y$ (``blocks``), ``(*batch, block, grid)`` float64, without forming $W$: with
        $d = 1/(e + \lambda)$, $H = Q^\top S'_{xy}$, $M = Q^\top S'_{xx} Q$ (one for all blocks) and $C = G G^\top$
        (primes: ``other``'s statistics, a block's columns),

        $$\operatorname{tr} W^\top S'_{xy} = \sum_i d_i (G \odot H)_{i\cdot}\mathbf 1,\qquad
        \operatorname{tr} W^\top S'_{xx} W = d^\top (M \odot C)\, d,$$

        and the offset of the means $\Delta\bar y - G^\top (d \odot Q^\top \Delta\bar x)$: $O(D^2)$ per ridge after
        the $D^3$ products (in the path's dtype; the sums over ridges in float64)."""
        q, dtype = self.q, self.q.dtype
        m = (q.mT @ other.sxx_.to(dtype) @ q).double()  # (*batch, D, D)
        u = (q.mT @ (other.mean_x_ - self.fit.mean_x_).to(dtype).unsqueeze(-1)).double()  # (*batch, D, 1)
        _, d = self._inverse()  # (*batch, grid, D)
        n = torch.as_tensor(other.n_, dtype=torch.float64, device=d.device).unsqueeze(-1)  # (*batch, 1)
        scores = []
        for block in blocks:
            g = self.g[..., block]
            h = (g * (q.mT @ other.sxy_[..., block].to(dtype))).double().sum(-1).unsqueeze(-2)  # (*batch, 1, D)
            k = m * (g @ g.mT).double()
            g = g.double()
            dy = (other.mean_y_[..., block] - self.fit.mean_y_[..., block]).unsqueeze(-2)  # (*batch, 1, block)
            syy = other.syy_[..., block].sum(-1, keepdim=True)  # (*batch, 1)
            offset = dy - (d * u.mT) @ g  # (*batch, grid, block)
            quadratic = ((d @ k) * d).sum(-1)  # (*batch, grid)
            resid = syy - 2 * (d * h).sum(-1) + quadratic + n * offset.pow(2).sum(-1)
            scores.append(1 - resid / syy)
        return torch.stack(scores, -2)
