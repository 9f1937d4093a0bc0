"""Empty inputs give empty outputs of the right shape on every path; an empty carrier follows one rule.

No queries or batch 0: every result (output, weights, log-normalizer, Fisher, entropy) is empty and
shaped as for a non-empty input. No keys: in ``nn`` the carrier is empty, as for a query whose keys
are all masked (output zero, weights ``(..., 0)``, $G = \\log 0 = -\\infty$); in ``core`` a measure
needs an atom (``ValueError`` naming the argument), and so does Hopfield retrieval (naming ``stored``).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from expattn.core.empirical import Empirical
from expattn.core.mixture import GaussianMixture
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.nn.carriers import carrier_names
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.hopfield_layers import HopfieldLayer, HopfieldPooling

E, HEADS = 8, 2
SIZES = [(2, 0, 0), (0, 3, 3), (2, 0, 3), (0, 0, 0)]  # (batch, query, key) with nothing to compute


def _attention(carrier: str, causal: bool) -> ExpFamAttention:
    torch.manual_seed(0)
    return ExpFamAttention(ExpFamAttentionConfig(E, HEADS, carrier=carrier, causal=causal))


@pytest.mark.parametrize(
    ("carrier", "need_weights", "causal", "size"),
    list(itertools.product(carrier_names(), [False, True], [False, True], SIZES)),
)
def test_attention_without_queries_or_batch_is_empty(carrier, need_weights, causal, size):
    batch, queries, keys = size
    module = _attention(carrier, causal and queries == keys)
    gen = torch.Generator().manual_seed(1)
    query, key = torch.randn(batch, queries, E, generator=gen), torch.randn(batch, keys, E, generator=gen)
    out = module(query, need_weights=need_weights) if queries == keys else module(query, key, key,
                                                                                     need_weights=need_weights)
    assert out.shape == (batch, queries, E)
    if need_weights:
        assert module.last_weights.shape == (batch, HEADS, queries, keys)
        assert module.last_log_normalizer.shape == (batch, HEADS, queries)


@pytest.mark.parametrize(("carrier", "need_weights"), list(itertools.product(carrier_names(), [False, True])))
def test_attention_without_keys_is_the_empty_carrier(carrier, need_weights):
    """Zero keys is every key masked: output zero (the module's out_proj bias is off), G = -inf, no NaN."""
    torch.manual_seed(0)
    module = ExpFamAttention(ExpFamAttentionConfig(E, HEADS, carrier=carrier, bias=False))
    gen = torch.Generator().manual_seed(2)
    out = module(torch.randn(2, 5, E, generator=gen), torch.randn(2, 0, E), torch.randn(2, 0, E),
                 need_weights=need_weights)
    assert torch.equal(out, torch.zeros(2, 5, E))
    if need_weights:
        assert module.last_weights.shape == (2, HEADS, 5, 0)
        assert torch.equal(module.last_log_normalizer, torch.full((2, HEADS, 5), -torch.inf))


def _measure(kind: str, atoms: torch.Tensor):
    dim = atoms.shape[-1]
    if kind == "empirical":
        return Empirical(atoms)
    eye = torch.eye(dim, dtype=atoms.dtype)
    shape = atoms.shape[:-2] + (() if kind == "mixture_shared" else atoms.shape[-2:-1])
    return GaussianMixture(atoms, 0.5 * eye.expand(*shape, dim, dim))


MEASURES = ["empirical", "mixture_shared", "mixture_per_component"]
EMPTY = [((5, 3), (0, 3)), ((0, 5, 3), (0, 2, 3)), ((2, 5, 3), (2, 0, 3)), ((0, 5, 3), (1, 2, 3))]


@pytest.mark.parametrize(("kind", "shapes"), list(itertools.product(MEASURES, EMPTY)))
@pytest.mark.parametrize("method", ["log_normalizer", "mean", "fisher", "entropy"])
@pytest.mark.filterwarnings("ignore:std\\(\\).*degrees of freedom")  # the mixture's Monte Carlo entropy of nothing
def test_measures_on_empty_batches_and_queries(kind, shapes, method):
    (atom_shape, eta_shape) = shapes
    gen = torch.Generator().manual_seed(3)
    atoms = torch.randn(*atom_shape, dtype=torch.float64, generator=gen)
    eta = torch.randn(*eta_shape, dtype=torch.float64, generator=gen)
    batch = torch.broadcast_shapes(atom_shape[:-2], eta_shape[:-2])
    want = {"log_normalizer": (), "mean": (3,), "fisher": (3, 3), "entropy": ()}[method]
    assert getattr(_measure(kind, atoms), method)(eta).shape == (*batch, eta_shape[-2], *want)


@pytest.mark.parametrize("kind", MEASURES)
def test_measures_without_atoms_raise_naming_them(kind):
    with pytest.raises(ValueError, match=r"(atoms|means) must hold at least one"):
        _measure(kind, torch.randn(2, 0, 3, dtype=torch.float64))


@pytest.mark.parametrize("need_energy", [False, True])
@pytest.mark.parametrize("size", [(2, 0, 3), (0, 3, 3), (2, 0, 0), (0, 3, 0)])
def test_hopfield_without_queries_or_batch_is_empty(size, need_energy):
    batch, queries, stored = size
    gen = torch.Generator().manual_seed(4)
    state, patterns = torch.randn(batch, queries, 4, generator=gen), torch.randn(batch, stored, 4, generator=gen)
    result = Hopfield(HopfieldConfig(4)).retrieve(state, patterns, need_energy=need_energy)
    assert result.output.shape == (batch, queries, 4)
    assert result.weights.shape == (batch, 1, queries, stored)
    assert result.energy.shape == ((2, batch, 1, queries) if need_energy else (0,))
    layer = HopfieldLayer(HopfieldConfig(4), 5)
    assert layer.retrieve(state, need_energy=need_energy).output.shape == (batch, queries, 4)
    if stored or not batch:  # learned queries over no stored pattern: the error below
        pooling = HopfieldPooling(HopfieldConfig(4), num_queries=2)
        assert pooling.retrieve(patterns, need_energy=need_energy).output.shape == (batch, 2, 4)


def test_hopfield_without_stored_patterns_raises_naming_them():
    with pytest.raises(ValueError, match="stored must hold at least one stored pattern"):
        Hopfield(HopfieldConfig(4))(torch.randn(2, 3, 4), torch.randn(2, 0, 4))
    with pytest.raises(ValueError, match="stored must hold at least one stored pattern"):
        HopfieldPooling(HopfieldConfig(4))(torch.randn(2, 0, 4))
