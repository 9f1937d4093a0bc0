"""One rule for empty inputs beyond ``ExpFamAttention``: a batch of 0 gives an empty output, as PyTorch's
modules do; an empty key set is an error naming the argument wherever no mask reads it as every key masked."""

from __future__ import annotations

import pytest
import torch

from expattn.core.contrastive import info_nce
from expattn.core.empirical import Empirical
from expattn.core.mixture import GaussianMixture
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.implicit import ImplicitAttention, InjectedAttention


def _gen() -> torch.Generator:
    return torch.Generator().manual_seed(11)


@pytest.mark.parametrize("grad", [False, True])
def test_implicit_attention_on_a_batch_of_zero_is_empty(grad):
    torch.manual_seed(0)
    layer = ImplicitAttention(InjectedAttention(8, heads=2))
    x = torch.randn(0, 5, 8, requires_grad=grad)
    with torch.set_grad_enabled(grad):
        z, stats = layer.forward_with_stats(x)
    assert z.shape == (0, 5, 8) and stats.forward.converged and stats.forward.iterations == 0
    if grad:
        z.sum().backward()
        assert x.grad.shape == x.shape
    full = layer(torch.randn(2, 5, 8, generator=_gen()))  # the control: a non-empty batch is solved
    assert full.shape == (2, 5, 8) and layer.last_stats.forward.evaluations > 0


def test_info_nce_without_anchors_is_empty_or_zero_and_refuses_the_mean():
    anchors, candidates = torch.randn(0, 3, 4, generator=_gen()), torch.randn(0, 5, 4, generator=_gen())
    targets = torch.zeros(0, 3, dtype=torch.long)
    assert info_nce(anchors, candidates, targets, reduction="none").shape == (0, 3)
    assert info_nce(anchors, candidates, targets, reduction="sum").item() == 0.0
    with pytest.raises(ValueError, match="reduction 'mean' needs at least one anchor"):
        info_nce(anchors, candidates, targets)
    some = info_nce(torch.randn(2, 3, 4, generator=_gen()), torch.randn(2, 5, 4, generator=_gen()),
                    torch.zeros(2, 3, dtype=torch.long))
    assert torch.isfinite(some)  # the control: anchors present, a finite mean


def test_info_nce_without_candidates_names_them():
    with pytest.raises(ValueError, match="atoms must hold at least one atom"):
        info_nce(torch.randn(2, 3, 4), torch.randn(2, 0, 4), torch.zeros(2, 3, dtype=torch.long))


def _mixture(atoms: torch.Tensor) -> GaussianMixture:
    return GaussianMixture(atoms, torch.eye(3, dtype=atoms.dtype).expand(2, 3, 3))


@pytest.mark.parametrize("build", [Empirical, _mixture], ids=["empirical", "mixture"])
def test_measures_without_atoms_name_them(build):
    with pytest.raises(ValueError, match=r"(atoms|means) must hold at least one"):
        build(torch.randn(2, 0, 3, dtype=torch.float64))
    build(torch.randn(2, 1, 3, dtype=torch.float64, generator=_gen()))  # the control: one atom is enough


def test_hopfield_retrieval_without_stored_patterns_names_them():
    with pytest.raises(ValueError, match="stored must hold at least one stored pattern"):
        Hopfield(HopfieldConfig(4)).retrieve(torch.randn(2, 3, 4), torch.randn(2, 0, 4))
    out = Hopfield(HopfieldConfig(4)).retrieve(torch.randn(0, 3, 4), torch.randn(0, 2, 4)).output
    assert out.shape == (0, 3, 4)  # a batch of 0: empty
