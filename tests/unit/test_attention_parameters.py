"""A NaN or infinity in any parameter of ``ExpFamAttention`` raises on the default path, naming the parameter.

A NaN in a query or key row of the projections makes NaN logits, for which the fused kernel returns finite
numbers: the output alone cannot show it, so the check also reads the per-head queries and keys (in the same
single read-back as the output)."""

from __future__ import annotations

import pytest
import torch

from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.validation import validating

CONFIGS = {
    "packed": dict(embed_dim=8, num_heads=2),
    "separate": dict(embed_dim=8, num_heads=2, kdim=6, vdim=6),
    "gqa": dict(embed_dim=8, num_heads=4, num_kv_heads=2),
    "mixture": dict(embed_dim=8, num_heads=2, carrier="gaussian_mixture"),
}
# positions in the flattened parameter: the first, middle and last entry (in in_proj_weight: a query, a key and
# a value row)
WHERE = (0, 0.5, -1)


def _module(kind: str) -> ExpFamAttention:
    torch.manual_seed(0)
    return ExpFamAttention(ExpFamAttentionConfig(**CONFIGS[kind]))


def _inputs(module: ExpFamAttention) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    c = module.config
    return torch.randn(2, 5, c.embed_dim, generator=gen), torch.randn(2, 7, c.kdim or c.embed_dim, generator=gen)


def _call(module: ExpFamAttention, how: str) -> torch.Tensor:
    x, kv = _inputs(module)
    kv = None if module.in_proj_weight is not None else kv
    return module(x, kv, kv) if how == "forward" else module.heads(x, kv, kv)


def _cases():
    for how in ("forward", "heads"):  # heads() stops before out_proj: its parameters take no part there
        for kind in CONFIGS:
            for name, p in _module(kind).named_parameters():
                for where in WHERE if how == "forward" or not name.startswith("out_proj") else ():
                    yield how, kind, name, int(where * p.numel()) if where == 0.5 else where


CASES = list(_cases())


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize(("how", "kind", "parameter", "position"), CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_a_non_finite_parameter_raises_naming_it(how, kind, parameter, position, bad):
    module = _module(kind)
    _call(module, how)  # the control: the same module and inputs with finite parameters pass
    with torch.no_grad():
        dict(module.named_parameters())[parameter].view(-1)[position] = bad
    with pytest.raises(ValueError, match=rf"parameter {parameter} must be finite"):
        _call(module, how)


def test_the_nan_query_row_that_the_fused_kernel_hides():
    """The case the output check alone misses: with the check off, the output is finite and changed."""
    module = _module("packed")
    before = _call(module, "forward")
    with torch.no_grad():
        module.in_proj_weight[0, 0] = float("nan")
    with validating(False):
        after = _call(module, "forward")
    assert torch.isfinite(after).all() and not torch.equal(after, before)  # what the check must catch
    with pytest.raises(ValueError, match="parameter in_proj_weight must be finite"):
        _call(module, "forward")


def test_a_rotary_map_that_makes_nan_is_named():
    module = _module("packed")
    x, _ = _inputs(module)

    def rotary(q, k):
        return q, k.clone().index_fill_(-1, torch.tensor([0]), float("nan"))

    with pytest.raises(ValueError, match=r"per-head key .* is not finite although the inputs and parameters are"):
        module(x, rotary=rotary)
    module(x, rotary=lambda q, k: (q, k))  # the control: a finite rotary passes
