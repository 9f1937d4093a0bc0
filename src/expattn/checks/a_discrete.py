"""Checks of the discrete (empirical) carrier: A1 and A3."""

from __future__ import annotations

import math

import torch

from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.tools import compare, generator, max_abs, randn
from expattn.core.empirical import Empirical

DRAWS = 50


@register_claim(
    "A1",
    method="explicit exp/sum formula in float64 vs Empirical.probs, 50 random draws",
)
def check_a1(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, uniform, unweighted = [], [], []
    for _ in range(DRAWS):
        n, d, q = torch.randint(1, 20, (3,), generator=gen).tolist()
        atoms, eta = randn(gen, n, d), randn(gen, q, d)
        w = torch.rand(n, generator=gen, dtype=torch.float64) + 0.1
        unnorm = w * torch.exp(eta @ atoms.T)
        direct = unnorm / unnorm.sum(-1, keepdim=True)
        errors.append(max_abs(Empirical.from_weights(atoms, w).probs(eta), direct))
        plain = torch.exp(eta @ atoms.T)  # negative control: the weights left out of the formula
        unweighted.append(max_abs(Empirical.from_weights(atoms, w).probs(eta), plain / plain.sum(-1, keepdim=True)))
        ones = Empirical(atoms).probs(eta)
        inv_n = Empirical(atoms, torch.full((n,), -math.log(n), dtype=torch.float64)).probs(eta)
        uniform.append(max_abs(ones, inv_n))
    return compare(
        "A1", "identity", max(errors), 1e-12, draws=DRAWS, uniform_weight_gap=max(uniform),
        negatives={"weights left out: softmax(x.eta)": max(unweighted)},
    )


@register_claim(
    "A3",
    method="autograd of logsumexp vs the fused attention kernel, float64, 50 draws",
)
def check_a3(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, scaled, nw, unscaled = [], [], [], []
    for _ in range(DRAWS):
        b, n, q, d = torch.randint(1, 12, (4,), generator=gen).tolist()
        keys, queries = randn(gen, b, n, d), randn(gen, b, q, d)
        eta = queries.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(torch.logsumexp(eta @ keys.mT, -1).sum(), eta)
        errors.append(max_abs(Empirical(keys).mean(queries), grad))
        # Learned-weight form: attention with scale 1/sqrt(d) and V = K.
        attn = torch.softmax(queries @ keys.mT / math.sqrt(d), -1) @ keys
        (g2,) = torch.autograd.grad(torch.logsumexp(eta @ keys.mT / math.sqrt(d), -1).sum(), eta)
        scaled.append(max_abs(attn, math.sqrt(d) * g2))
        unscaled.append(max_abs(attn, g2))  # negative control: the factor sqrt(d) left out
        # Nadaraya-Watson estimate with kernel exp(x.eta) of the regression x -> x.
        kernel = torch.exp(queries @ keys.mT)
        nw.append(max_abs((kernel @ keys) / kernel.sum(-1, keepdim=True), grad))
    error = max(max(errors), max(scaled), max(nw))
    return compare(
        "A3", "identity", error, 1e-10, draws=DRAWS,
        kernel_error=max(errors), scaled_error=max(scaled), nadaraya_watson_error=max(nw),
        negatives={"learned-weight form without the factor sqrt(d)": max(unscaled)},
    )
