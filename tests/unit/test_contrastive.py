"""InfoNCE / N-pair as the empirical family's NLL (C1, C2) against F.cross_entropy."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from expattn.core.contrastive import contrastive_family, in_batch_info_nce, info_nce, project_to_sphere

F64 = torch.float64


@pytest.mark.parametrize("cosine", [False, True])
def test_info_nce_equals_cross_entropy_with_gradients(gen, cosine):
    anchors = torch.randn(2, 5, 4, generator=gen, dtype=F64, requires_grad=True)
    candidates = torch.randn(2, 7, 4, generator=gen, dtype=F64, requires_grad=True)
    targets = torch.randint(0, 7, (2, 5), generator=gen)
    tau = 0.07 + torch.rand(()).item()
    loss = info_nce(anchors, candidates, targets, tau, cosine=cosine)
    a, c = (F.normalize(anchors, dim=-1), F.normalize(candidates, dim=-1)) if cosine else (anchors, candidates)
    reference = F.cross_entropy((a @ c.mT / tau).reshape(-1, 7), targets.reshape(-1))
    torch.testing.assert_close(loss, reference, rtol=0, atol=1e-12)
    for g_lib, g_ref in zip(
        torch.autograd.grad(loss, (anchors, candidates)),
        torch.autograd.grad(reference, (anchors, candidates)),
        strict=True,
    ):
        torch.testing.assert_close(g_lib, g_ref, rtol=0, atol=1e-12)


def test_reductions_and_family(gen):
    anchors, candidates = torch.randn(3, 4, generator=gen, dtype=F64), torch.randn(6, 4, generator=gen, dtype=F64)
    targets = torch.randint(0, 6, (3,), generator=gen)
    per_anchor = info_nce(anchors, candidates, targets, 0.5, reduction="none")
    reference = F.cross_entropy(anchors @ candidates.T / 0.5, targets, reduction="none")
    torch.testing.assert_close(per_anchor, reference, rtol=0, atol=1e-12)
    torch.testing.assert_close(info_nce(anchors, candidates, targets, 0.5, reduction="sum"), reference.sum())
    carrier, eta = contrastive_family(anchors, candidates, 0.5)
    # the loss is G(eta) - x_t . eta: log-normalizer minus the positive's logit
    explicit = carrier.log_normalizer(eta) - (candidates[targets] * eta).sum(-1)
    torch.testing.assert_close(per_anchor, explicit, rtol=0, atol=1e-12)


def test_in_batch_symmetric_is_clip_loss(gen):
    x, y = torch.randn(8, 5, generator=gen, dtype=F64), torch.randn(8, 5, generator=gen, dtype=F64)
    logits = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T / 0.1
    labels = torch.arange(8)
    clip = 0.5 * (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels))
    torch.testing.assert_close(in_batch_info_nce(x, y, 0.1, cosine=True, symmetric=True), clip, rtol=0, atol=1e-12)


def test_projection_to_sphere_and_errors(gen):
    x = torch.randn(4, 3, generator=gen, dtype=F64)
    torch.testing.assert_close(project_to_sphere(x).norm(dim=-1), torch.ones(4, dtype=F64), rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="zero vector"):
        project_to_sphere(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="temperature"):
        info_nce(x[None], x[None], torch.zeros(1, 4, dtype=torch.long), temperature=0.0)
    with pytest.raises(TypeError, match="targets"):
        info_nce(x[None], x[None], torch.zeros(1, 4), temperature=1.0)
    with pytest.raises(ValueError, match="targets"):
        info_nce(x[None], x[None], torch.zeros(1, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="reduction"):
        info_nce(x[None], x[None], torch.zeros(1, 4, dtype=torch.long), reduction="avg")
    with pytest.raises(ValueError, match="targets must index"):
        info_nce(x[None], x[None], torch.full((1, 4), 9, dtype=torch.long))


def test_float32_large_logits_match_float64(gen):
    anchors, candidates = torch.randn(2, 6, 8, generator=gen), torch.randn(2, 9, 8, generator=gen)
    targets = torch.randint(0, 9, (2, 6), generator=gen)
    # temperature 1e-3 pushes the logits towards +-1e4
    lo = info_nce(anchors, candidates, targets, 1e-3, reduction="none")
    hi = info_nce(anchors.double(), candidates.double(), targets, 1e-3, reduction="none")
    assert torch.isfinite(lo).all()
    # float32 logits ~1e4 carry ~1e-3 absolute rounding
    torch.testing.assert_close(lo.double(), hi, rtol=1e-5, atol=2e-2)
