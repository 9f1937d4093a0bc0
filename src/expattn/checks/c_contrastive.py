"""Checks of the contrastive-learning reading: C1 (InfoNCE = NLL of A1) and C2 (cosine = sphere projection)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from expattn.catalogue.registry import RunContext, register_claim
from expattn.checks.tools import compare, generator, max_abs, randn
from expattn.core.contrastive import in_batch_info_nce, info_nce, project_to_sphere
from expattn.core.empirical import Empirical

DRAWS = 24


@register_claim(
    "C1",
    method="library loss and its gradients vs F.cross_entropy of the similarity logits (autograd), float64, "
    "random temperatures, dot and cosine",
)
def check_c1(ctx: RunContext):
    gen = generator(ctx.seed)
    errors, grads, untempered = [], [], []
    for i in range(DRAWS // 4 if ctx.quick else DRAWS):
        b, q, k, d = torch.randint(1, 9, (4,), generator=gen).tolist()
        tau = 0.05 + torch.rand((), generator=gen, dtype=torch.float64).item()
        cosine = i % 2 == 1
        anchors = randn(gen, b, q, d).requires_grad_(True)
        candidates = randn(gen, b, k, d).requires_grad_(True)
        targets = torch.randint(0, k, (b, q), generator=gen)
        loss = info_nce(anchors, candidates, targets, tau, cosine=cosine)
        a, c = (F.normalize(anchors, dim=-1), F.normalize(candidates, dim=-1)) if cosine else (anchors, candidates)
        logits = a @ c.mT / tau  # (B, Q, K)
        reference = F.cross_entropy(logits.reshape(-1, k), targets.reshape(-1))
        errors.append(abs(loss.item() - reference.item()))
        plain = F.cross_entropy((a @ c.mT).reshape(-1, k), targets.reshape(-1))  # the temperature left out
        untempered.append(abs(loss.item() - plain.item()))
        g_lib = torch.autograd.grad(loss, (anchors, candidates))
        g_ref = torch.autograd.grad(reference, (anchors, candidates))
        grads.append(max(max_abs(x, y) for x, y in zip(g_lib, g_ref, strict=True)))
        # In-batch (N-pair) form: positives on the diagonal of the similarity matrix.
        x, y = randn(gen, k, d), randn(gen, k, d)
        sim = x @ y.T / tau
        errors.append(abs(in_batch_info_nce(x, y, tau).item() - F.cross_entropy(sim, torch.arange(k)).item()))
    error = max(max(errors), max(grads))
    return compare(
        "C1", "identity", error, 1e-12, draws=len(errors), loss_error=max(errors), gradient_error=max(grads),
        negatives={"logits without the temperature tau": max(untempered)},
    )


@register_claim(
    "C2",
    method="F.cosine_similarity vs projected dot products (float64); 30 steps of self-attention ascent on a "
    "cloud of 64 points in 8-D with and without projection",
)
def check_c2(ctx: RunContext):
    gen = generator(ctx.seed)
    errors = []
    for _ in range(DRAWS // 4 if ctx.quick else DRAWS):
        n, m, d = torch.randint(1, 12, (3,), generator=gen).tolist()
        a, b = randn(gen, n, d), randn(gen, m, d)
        cosine = F.cosine_similarity(a[:, None, :], b[None, :, :], dim=-1)
        errors.append(max_abs(project_to_sphere(a) @ project_to_sphere(b).T, cosine))
    steps = 10 if ctx.quick else 30
    free = sphere = project_to_sphere(randn(gen, 64, 8))
    step_norms, free_norms = [], []
    for _ in range(steps):
        free = free + Empirical(free).mean(free)
        free_norms.append(free.norm(dim=-1).max().item())
        stepped = sphere + Empirical(sphere).mean(sphere)  # each term has norm <= 1
        step_norms.append(stepped.norm(dim=-1).max().item())
        sphere = project_to_sphere(stepped)
    bound_violation = max(0.0, max(step_norms) - 2.0)
    error = max(max(errors), bound_violation, abs(sphere.norm(dim=-1) - 1).max().item())
    growth = free.norm(dim=-1).max().item()
    record = compare(
        "C2",
        "identity+dynamics",
        error,
        1e-12,
        draws=len(errors),
        steps=steps,
        max_step_norm_on_sphere=max(step_norms),
        final_max_norm_unprojected=growth,
        negatives={"the same bound |step| <= 2 without the projection": max(0.0, max(free_norms) - 2.0)},
    )
    record.criterion += "; and the unprojected ascent must grow the largest norm above 10 (from 1)"
    if growth <= 10.0:  # the unprojected cloud started on the unit sphere and must have expanded
        record.verdict = "fail"
        record.notes = f"the unprojected ascent did not expand the cloud (max norm {growth:.3g} after {steps} steps)"
    return record
