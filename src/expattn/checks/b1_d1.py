"""Checks of the attention update operator (B1) and the modern Hopfield energy (D1) on the nn layers."""

from __future__ import annotations

import torch
from torch import Tensor

from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.tools import compare, generator, max_abs, randn
from expattn.core.hopfield import hopfield_energy, hopfield_update
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.results.plotting import pyplot, save_figure

F64 = torch.float64
B1_TOL = 1e-10  # float64 round-off of softmax/matmul on O(1)-O(10) numbers is ~1e-14; 1e-10 leaves room.
D1_TOL = 1e-9  # energies of size <= ~1e2 in float64: a real increase of 1e-9 is 1e5 ulps above round-off.


def _identity_layer(dim: int, beta: float, carrier: str) -> ExpFamAttention:
    """One head, no bias, identity W_q, W_k, W_v, W_o: attention(x) is the gradient of G at beta x."""
    layer = ExpFamAttention(
        ExpFamAttentionConfig(embed_dim=dim, num_heads=1, bias=False, beta=beta, carrier=carrier)
    ).double()
    with torch.no_grad():
        for lin in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
            lin.weight.copy_(torch.eye(dim, dtype=F64))
    return layer


@register_claim(
    "B1",
    method="ExpFamAttention.residual_step (identity projections, empirical and gaussian_mixture carriers) "
    "vs eta + autograd of G with the carrier held fixed, float64, 50 random clouds",
)
def check_b1(ctx: RunContext):
    gen = generator(ctx.seed)
    draws = 10 if ctx.quick else 50
    errors = {"empirical": 0.0, "gaussian_mixture": 0.0}
    unscaled = 0.0  # negative control: the gradient taken at x instead of at eta = beta x
    for _ in range(draws):
        n, d = torch.randint(2, 16, (2,), generator=gen).tolist()
        x = randn(gen, 2, n, d)
        beta = 0.1 + 2.0 * torch.rand((), generator=gen, dtype=F64).item()
        for carrier in errors:
            layer = _identity_layer(d, beta, carrier)
            sigma = torch.zeros(d, d, dtype=F64)
            if carrier == "gaussian_mixture":
                a = randn(gen, d, d)
                sigma = a @ a.T / d
                layer.carrier.set_covariance(sigma[None])
            eta = (beta * x).requires_grad_(True)  # natural parameter of each point
            g = 0.5 * (eta * (eta @ sigma)).sum(-1) + torch.logsumexp(eta @ x.mT, -1)  # carrier x fixed
            (grad,) = torch.autograd.grad(g.sum(), eta)
            at_x = x.clone().requires_grad_(True)
            g_x = 0.5 * (at_x * (at_x @ sigma)).sum(-1) + torch.logsumexp(at_x @ x.mT, -1)
            (grad_x,) = torch.autograd.grad(g_x.sum(), at_x)
            with torch.no_grad():
                step = layer.residual_step(x, 1.0)
            errors[carrier] = max(errors[carrier], max_abs(step, x + grad))
            unscaled = max(unscaled, max_abs(step, x + grad_x))
    return compare(
        "B1", "identity", max(errors.values()), B1_TOL, draws=draws,
        empirical_error=errors["empirical"], gaussian_mixture_error=errors["gaussian_mixture"],
        negatives={"gradient at x instead of at beta x": unscaled},
    )


def _printed_energy(xi: Tensor, patterns: Tensor, beta: float) -> Tensor:
    """Seed 004 as printed: the minus sign before the log-sum-exp term is lost."""
    return 0.5 * (xi * xi).sum(-1) + torch.logsumexp(beta * xi @ patterns.mT, -1) / beta


def _trace_plot(ctx: RunContext, traces: list[tuple[list[float], list[float]]]) -> str:
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    for corrected, printed in traces:
        left.plot(corrected, marker=".")
        right.plot(printed, marker=".")
    left.set(title="E = 1/2 |xi|^2 - lse/beta (corrected)", xlabel="update", ylabel="energy")
    right.set(title="as printed in 004 (+ lse/beta)", xlabel="update")
    return save_figure(fig, ctx.out_dir, "d1_energy_traces.png")[0]


@register_claim(
    "D1",
    method="energy along 30 updates of random states, 50 draws of patterns and beta in [0.05, 10], float64; "
    "Hopfield(update_steps_max=None) fixed point: one more update and autograd grad E",
)
def check_d1(ctx: RunContext):
    gen = generator(ctx.seed)
    draws = 10 if ctx.quick else 50
    increase = printed_increase = residual = 0.0
    traces = []
    for i in range(draws):
        n, q, d = torch.randint(2, 20, (3,), generator=gen).tolist()
        patterns, xi = randn(gen, n, d), randn(gen, q, d, scale=2.0)
        beta = float(torch.empty(()).log_normal_(0.0, 1.2, generator=gen).clamp(0.05, 10.0))
        corrected, printed = [hopfield_energy(xi, patterns, beta)], [_printed_energy(xi, patterns, beta)]
        state = xi
        for _ in range(30):
            state = hopfield_update(state, patterns, beta)
            corrected.append(hopfield_energy(state, patterns, beta))
            printed.append(_printed_energy(state, patterns, beta))
        rise = torch.stack(corrected).diff(dim=0).amax().item()
        scale = max(1.0, torch.stack(corrected).abs().amax().item())
        increase = max(increase, rise / scale)
        printed_increase = max(printed_increase, torch.stack(printed).diff(dim=0).amax().item())
        if i < 6:
            traces.append(([e[0].item() for e in corrected], [e[0].item() for e in printed]))
        layer = Hopfield(HopfieldConfig(input_size=d, beta=beta, update_steps_max=None, update_steps_eps=1e-13))
        fixed = layer.double().retrieve(xi[None], patterns[None]).output[0]
        residual = max(residual, max_abs(hopfield_update(fixed, patterns, beta), fixed))
        point = fixed.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(hopfield_energy(point, patterns, beta).sum(), point)
        residual = max(residual, grad.abs().max().item())
    record = compare(
        "D1", "identity", max(increase, residual), D1_TOL, as_printed_error=max(printed_increase, 0.0),
        draws=draws, max_relative_energy_increase=increase, fixed_point_residual=residual,
        notes="as printed (004 loses the minus before logsumexp) the 'energy' rises along the same updates",
    )
    if ctx.out_dir is not None:
        record.plots.append(_trace_plot(ctx, traces))
    return record
