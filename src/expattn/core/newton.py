r"""Batched damped Newton ascent for $\sup_\eta\, \eta^\top m - G(\eta)$ (the convex conjugate)."""

from __future__ import annotations

import torch
from torch import Tensor


def maximise_concave(measure, m: Tensor, max_iter: int = 100, tol: float = 1e-10) -> tuple[Tensor, Tensor]:
    r"""Maximise $f(\eta) = \eta^\top m - G(\eta)$ over $\eta$, batched over ``m``'s leading dims.

    Newton direction $d = (\nabla^2 G + \lambda I)^{-1}(m - \nabla G)$ with a tiny ridge
    $\lambda$ (the Fisher matrix is singular when the carrier spans a lower-dimensional set), then
    halve the step until $f$ increases and $\eta$ stays in the domain. Converged when
    $\|m - \nabla G(\eta)\| \le$ ``tol`` times $\max(1, \|m\|)$.
    Returns ``(f(eta_star), eta_star)``.
    """
    eta = measure.interior_point(m)
    eye = torch.eye(m.shape[-1], dtype=m.dtype, device=m.device)
    scale = m.norm(dim=-1).clamp_min(1.0)

    def objective(e: Tensor, inside_point: Tensor) -> Tensor:
        # Points outside the domain are replaced by a point inside before G is evaluated (G would
        # raise there), then scored -inf so the line search rejects them.
        inside = measure.in_domain(e)
        safe = torch.where(inside.unsqueeze(-1), e, inside_point)
        value = (safe * m).sum(-1) - measure.log_normalizer(safe)
        return torch.where(inside & torch.isfinite(value), value, -torch.inf)

    with torch.no_grad():
        value = objective(eta, eta)
        for _ in range(max_iter):
            residual = m - measure.mean(eta)
            if (residual.norm(dim=-1) <= tol * scale).all():
                break
            hess = measure.fisher(eta)
            ridge = 1e-12 * hess.diagonal(dim1=-2, dim2=-1).abs().amax(-1).clamp_min(1.0)
            step = torch.linalg.solve(hess + ridge[..., None, None] * eye, residual[..., None])[..., 0]
            t = torch.ones_like(value)
            accepted = torch.zeros_like(value, dtype=torch.bool)
            for _ in range(60):
                trial = eta + t[..., None] * step
                trial_value = objective(torch.where(accepted[..., None], eta, trial), eta)
                ok = (trial_value >= value) & ~accepted
                eta = torch.where(ok[..., None], trial, eta)
                value = torch.where(ok, trial_value, value)
                accepted = accepted | ok
                if accepted.all():
                    break
                t = torch.where(accepted, t, t / 2)
        residual = (m - measure.mean(eta)).norm(dim=-1)
        if not (residual <= 1e3 * tol * scale).all() or not torch.isfinite(value).all():
            raise ValueError(
                "m is not in the interior of the mean space of this measure (the conjugate is "
                f"infinite or not attained); worst gradient residual {residual.max().item():.3g}"
            )
    return value, eta
