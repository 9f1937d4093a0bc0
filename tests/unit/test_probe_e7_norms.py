"""E7's float64 normalization: the HuggingFace RMSNorms it knows reproduce their module; any other norm
(Gemma's 1 + w RMSNorm, an unknown class with a weight and an eps) is refused by name, not guessed."""

from __future__ import annotations

import importlib

import pytest
import torch
from torch import nn

from expattn.probes.hypotheses.e7_collapse import WEIGHTED_RMS_NORMS, normalize64

MODULES = {"LlamaRMSNorm": "llama", "MistralRMSNorm": "mistral", "MixtralRMSNorm": "mixtral", "Qwen2RMSNorm": "qwen2",
           "Qwen3RMSNorm": "qwen3", "Phi3RMSNorm": "phi3", "GraniteRMSNorm": "granite", "Olmo2RMSNorm": "olmo2",
           "T5LayerNorm": "t5"}


def _norm(name: str, arch: str, gen: torch.Generator) -> nn.Module:
    cls = getattr(importlib.import_module(f"transformers.models.{arch}.modeling_{arch}"), name)
    module = cls(16, eps=1e-3)
    with torch.no_grad():
        module.weight.copy_(torch.randn(16, generator=gen))
    return module


@pytest.mark.parametrize("name", sorted(WEIGHTED_RMS_NORMS))
def test_known_rms_norms_match_their_module(gen, name):
    module = _norm(name, MODULES[name], gen)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        own = module(x.float()).double()  # the module computes in float32
        mine = normalize64(x, module)
    # float32 rounding of the module's own computation: ~1e-7 relative; 1e-5 of the largest output allows it
    assert (mine - own).abs().max() <= 1e-5 * own.abs().max()
    # control: Gemma's (1 + w) formula on the same input is far from the module (the comparison can fail)
    gemma_like = mine * (1 + module.weight.double()) / module.weight.double()
    assert (gemma_like - own).abs().max() > 1e-2 * own.abs().max()


def test_unknown_norms_are_refused_by_name(gen):
    gemma = importlib.import_module("transformers.models.gemma.modeling_gemma").GemmaRMSNorm(16, eps=1e-6)
    x = torch.randn(2, 5, 16, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        gemma.weight.copy_(torch.randn(16, generator=gen))
        assert (gemma(x.float()).double() - normalize64(x, _norm("LlamaRMSNorm", "llama", gen))).abs().max() > 0.1
    with pytest.raises(TypeError, match="GemmaRMSNorm is not one E7 can apply in float64"):
        normalize64(x, gemma)

    class ScaledNorm(nn.Module):  # has a weight and an eps, but its formula is its own
        def __init__(self):
            super().__init__()
            self.weight, self.eps = nn.Parameter(torch.ones(16)), 1e-6

    with pytest.raises(TypeError, match="ScaledNorm is not one E7 can apply"):
        normalize64(x, ScaledNorm())
