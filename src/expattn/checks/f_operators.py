"""Checks of the audit's findings about attention, normalization and Hopfield energies: F7-F12.

References are torch autograd of explicitly written energies, ``torch.nn.functional.layer_norm``,
scipy quadrature and closed forms, all in float64; ``expattn``'s own layers are not used.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy import integrate

from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.tools import compare, generator, max_abs, randn

F64 = torch.float64


def _attention(x: torch.Tensor, keys: torch.Tensor, wq, wk, wv, wo) -> torch.Tensor:
    r"""$W_o W_v \sum_j \mathrm{softmax}_j(x^\top W_q^\top W_k x_j / \sqrt{d_k})\, x_j$ for queries ``(Q, D)``."""
    scores = (x @ wq.T) @ (keys @ wk.T).T / math.sqrt(wq.shape[0])
    return torch.softmax(scores, -1) @ keys @ wv.T @ wo.T


def _energy_gradient(x: torch.Tensor, keys: torch.Tensor, wq, wk) -> torch.Tensor:
    r"""Autograd of $G(x) = s\,\mathrm{logsumexp}_j(x^\top W_q^\top W_k x_j / s)$, $s = \sqrt{d_k}$, keys fixed."""
    s = math.sqrt(wq.shape[0])
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad((s * torch.logsumexp((x @ wq.T) @ (keys @ wk.T).T / s, -1)).sum(), x)
    return grad


@register_claim(
    "F7",
    method="one head, D = 6, d_k = 3, 9 keys, 20 draws: attention output vs autograd of the scaled log-sum-exp "
    "energy, with W_v = W_k, W_o = W_q^T (tied) and with independent random W_v, W_o (as printed: any weights)",
)
def check_f7(ctx: RunContext):
    gen = generator(ctx.seed)
    tied = printed = identity = 0.0
    for _ in range(20):
        wq, wk, wv, wo = randn(gen, 3, 6), randn(gen, 3, 6), randn(gen, 3, 6), randn(gen, 6, 3)
        keys, x = randn(gen, 9, 6), randn(gen, 4, 6)
        grad = _energy_gradient(x, keys, wq, wk)
        tied = max(tied, max_abs(_attention(x, keys, wq, wk, wk, wq.T), grad))
        printed = max(printed, max_abs(_attention(x, keys, wq, wk, wv, wo), grad))
        eye = torch.eye(6, dtype=F64)
        identity = max(identity, max_abs(_attention(x, keys, wq, wk, eye, eye), grad))
    return compare("F7", "identity", tied, 1e-10, as_printed_error=printed, draws=20,
                   negatives={"value and output weights ignored (W_o W_v = I)": identity})


def _entropy_terms(cloud: torch.Tensor, eta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Direct Shannon entropy of softmax(cloud @ eta), G - eta.grad G, and grad G, per query row of ``eta``."""
    logits = eta @ cloud.T
    p = torch.softmax(logits, -1)
    direct = -(p * torch.log_softmax(logits, -1)).sum(-1)
    mean = p @ cloud
    return direct, torch.logsumexp(logits, -1) - (eta * mean).sum(-1), mean


@register_claim(
    "F8",
    method="centred clouds (N = 16, D = 3, scales 0.5, 1, 2), each token as query: entropy identity, its "
    "derivative along the step (central difference, h = 1e-5) vs -m^T Cov eta, entropy before and after the step",
)
def check_f8(ctx: RunContext):
    gen = generator(ctx.seed)
    identity_err, slope_err, decrease, falling = 0.0, 0.0, 0.0, []
    for scale in (0.5, 1.0, 2.0):
        for _ in range(5):
            cloud = randn(gen, 16, 3, scale=scale)
            cloud = cloud - cloud.mean(0)
            direct, formula, mean = _entropy_terms(cloud, cloud)
            identity_err = max(identity_err, max_abs(direct, formula))
            p = torch.softmax(cloud @ cloud.T, -1)
            cov = torch.einsum("qn,ni,nj->qij", p, cloud, cloud) - mean[:, :, None] * mean[:, None, :]
            slope = -torch.einsum("qi,qij,qj->q", mean, cov, cloud)
            h = 1e-5
            ahead, behind = _entropy_terms(cloud, cloud + h * mean)[0], _entropy_terms(cloud, cloud - h * mean)[0]
            numeric = (ahead - behind) / (2 * h)
            slope_err = max(slope_err, max_abs(numeric, slope))
            after = _entropy_terms(cloud, cloud + mean)[0]
            decrease = max(decrease, (direct - after).max().item())
            falling.append((slope < 0).double().mean().item())
    return compare(
        "F8", "identity", max(identity_err, slope_err), 1e-7, as_printed_error=decrease, draws=15,
        entropy_identity_error=identity_err, derivative_error=slope_err,
        fraction_of_tokens_whose_entropy_falls=float(np.mean(falling)),
        measure="largest error of H = G - eta.grad G and of dH/dt = -m^T Cov eta",
        notes="as printed the step would never lower the entropy; the 'as printed' error is the largest drop "
        "in a query's attention entropy over one step",
    )


@register_claim(
    "F9",
    method="skewed, offset clouds (N = 256 tokens, D = 16, log-normal features with scales 0.1-10), "
    "torch layer_norm with random gamma, beta: per-token vs per-feature statistics of (y - beta) / gamma",
)
def check_f9(ctx: RunContext):
    gen = generator(ctx.seed)
    token_err = feature_err = gauss_err = 0.0
    norm_spread = []
    for _ in range(5):
        scales = 10 ** (2 * torch.rand(16, generator=gen, dtype=F64) - 1)
        cloud = torch.exp(randn(gen, 256, 16)) * scales + randn(gen, 16, scale=3.0)
        gamma, beta = 0.5 + 1.5 * torch.rand(16, generator=gen, dtype=F64), randn(gen, 16)
        z = (torch.nn.functional.layer_norm(cloud, (16,), gamma, beta, eps=0.0) - beta) / gamma
        token_err = max(token_err, z.mean(-1).abs().max().item(), (z.pow(2).mean(-1) - 1).abs().max().item())
        feature_err = max(feature_err, z.mean(0).abs().max().item(), (z.var(0, correction=0) - 1).abs().max().item())
        norm_spread.append((z.norm(dim=-1).std() / math.sqrt(16)).item())
        gauss = randn(gen, 256, 16)  # a Gaussian with the printed per-feature mean 0 and variance 1
        gauss_err = max(gauss_err, gauss.mean(-1).abs().max().item())
    return compare(
        "F9", "identity", token_err, 1e-10, as_printed_error=feature_err, draws=5,
        negatives={"a standard Gaussian cloud (the printed target) standardized per token": gauss_err},
        relative_spread_of_token_norms=max(norm_spread),
        measure="largest per-token |mean| and |mean square - 1| of (LN(x) - beta) / gamma",
        notes="as printed each feature would have mean beta and variance gamma^2 across tokens; the 'as printed' "
        "error is the largest deviation of those per-feature statistics",
    )


def _component_log_mass(pattern: np.ndarray) -> float:
    """log of int exp(-|v|^2 / 2 + W.v) dv by one scipy quadrature per coordinate (the integrand factorizes)."""
    return sum(
        math.log(integrate.quad(lambda v, w=w: math.exp(-0.5 * v * v + w * v), -np.inf, np.inf, epsrel=1e-13)[0])
        for w in pattern
    )


@register_claim(
    "F10",
    method="4 patterns in n = 3 dimensions (scale 1.5), 10 draws: each component's mass by quadrature vs "
    "(2 pi)^(n/2) exp(|W_mu|^2 / 2); the sum of the weights w_mu, printed and corrected",
)
def check_f10(ctx: RunContext):
    rng = np.random.default_rng(ctx.seed)
    errors, printed = [], []
    for _ in range(10):
        patterns = rng.normal(scale=1.5, size=(4, 3))
        half_sq = 0.5 * (patterns**2).sum(-1)
        log_mass = np.array([_component_log_mass(w) for w in patterns])
        corrected = 1.5 * math.log(2 * math.pi) + half_sq
        weights = np.exp(corrected - np.logaddexp.reduce(corrected))
        errors += [float(np.abs(log_mass - corrected).max()), abs(weights.sum() - 1)]
        printed_weights = np.exp(half_sq) / ((2 * math.pi) ** 1.5 * np.exp(half_sq).sum())
        printed += [float(np.abs(log_mass - half_sq).max()), abs(printed_weights.sum() - 1)]
    return compare("F10", "identity", max(errors), 1e-10, as_printed_error=min(printed), draws=10,
                   measure="largest |log component mass - log Z_mu| and |sum w - 1|")


def _hopfield_grad(xi: torch.Tensor, patterns: torch.Tensor) -> torch.Tensor:
    """Autograd of E(xi) = |xi|^2 / 2 - logsumexp(patterns @ xi), per row of ``xi``."""
    xi = xi.clone().requires_grad_(True)
    energy = 0.5 * (xi * xi).sum(-1) - torch.logsumexp(xi @ patterns.T, -1)
    return torch.autograd.grad(energy.sum(), xi)[0]


@register_claim(
    "F11",
    method="D = 4, 6 patterns, 20 draws: xi - g grad E (autograd) vs (1 - g) xi + g Attn(xi), g in {0.25, 0.5, 0.9}; "
    "the best step g for x + Attn(x) (least squares); Z in 1 D by quadrature vs the closed form",
)
def check_f11(ctx: RunContext):
    gen = generator(ctx.seed)
    step_err, residual_err, printed = 0.0, 0.0, []
    for _ in range(20):
        patterns, xi = randn(gen, 6, 4), randn(gen, 5, 4)
        grad, attn = _hopfield_grad(xi, patterns), torch.softmax(xi @ patterns.T, -1) @ patterns
        for g in (0.25, 0.5, 0.9):
            step_err = max(step_err, max_abs(xi - g * grad, (1 - g) * xi + g * attn))
        residual = xi + attn
        residual_err = max(residual_err, max_abs(residual, 2 * (xi - 0.5 * grad)))
        diff = residual - xi  # x + Attn - x = Attn must equal -g grad E for one g per token
        g = -(diff * grad).sum(-1) / (grad * grad).sum(-1)
        printed.append(((diff + g[:, None] * grad).norm(dim=-1) / residual.norm(dim=-1)).min().item())
    x1 = randn(gen, 3, scale=1.2).numpy()
    z_quad = integrate.quad(lambda v: float(np.exp(-0.5 * v * v + x1 * v).sum()), -np.inf, np.inf, epsrel=1e-13)[0]
    z_err = abs(math.log(z_quad) - math.log(math.sqrt(2 * math.pi) * np.exp(0.5 * x1**2).sum()))
    if not math.isfinite(z_err):
        raise ValueError("the partition function's quadrature is not finite")
    return compare(
        "F11", "identity", max(step_err, residual_err, z_err), 1e-10, as_printed_error=min(printed), draws=20,
        step_error=step_err, residual_as_twice_half_step_error=residual_err, partition_function_log_error=z_err,
        measure="largest error of the step identity, of x + Attn = 2 (x - grad E / 2) and of log Z",
        notes="as printed x + Attn(x) would be one gradient step x - g grad E; the 'as printed' error is the "
        "smallest relative distance to the best such step over all tokens",
    )


def _uniform_weight_gap(patterns: np.ndarray) -> float:
    r"""$\max_\mu |N w_\mu - 1|$ for $w_\mu \propto e^{|W_\mu|^2/2}$, patterns ``(N, n)``."""
    half_sq = 0.5 * (patterns**2).sum(-1)
    log_weights = half_sq - np.logaddexp.reduce(half_sq)
    return float(np.abs(len(patterns) * np.exp(log_weights) - 1).max())


@register_claim(
    "F12",
    method="N = 64 patterns in n = 32 dimensions, 20 draws: max |N w_mu - 1| for patterns whose squared norms lie "
    "in a band of width 0.1 (bound e^0.05 - 1) and for standard normal patterns (norms 5.7 +- 0.7)",
)
def check_f12(ctx: RunContext):
    rng = np.random.default_rng(ctx.seed)
    banded, printed = [], []
    for _ in range(20):
        patterns = rng.normal(size=(64, 32))
        printed.append(_uniform_weight_gap(patterns))
        radii = np.sqrt(32.0 + rng.uniform(0.0, 0.1, size=64))  # |W_mu|^2 in [32, 32.1]
        banded.append(_uniform_weight_gap(patterns * (radii / np.linalg.norm(patterns, axis=-1))[:, None]))
    return compare(
        "F12", "inequality", max(banded), 0.1, as_printed_error=min(printed), draws=20,
        norm_band_bound=math.expm1(0.05),
        measure="largest |N w_mu - 1| over the patterns (w_mu ~ 1/N read as within 10%)",
        notes="w_mu = exp(|W_mu|^2 / 2) / sum_nu exp(|W_nu|^2 / 2): uniform within e^(delta / 2) - 1 when the squared "
        "norms lie in a band of width delta; the 'as printed' error uses patterns whose norms differ by ~12%",
    )
