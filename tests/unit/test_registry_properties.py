"""Registries carry properties: a newly registered norm or carrier flows through every caller by its
declared properties (per_token, affine; uses_keys, softmax), never by its name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from tiny_models import tiny_lm

from expattn.core.registry import measure_names
from expattn.dynamics.operators import CARRIERS as DYNAMICS_CARRIERS
from expattn.nn import carriers, norms
from expattn.nn.carriers import Carrier, CarrierOutput, carrier_names, register_carrier
from expattn.nn.lm import LM
from expattn.nn.norms import Norm, NormConfig, register_norm
from expattn.probes.hypotheses import ESTIMATORS
from expattn.probes.models import lm_adapter
from expattn.sweeps.run import sweep_variants


@pytest.fixture
def registries(monkeypatch):
    """Copies of the two registries, so the dummy entries vanish after the test."""
    monkeypatch.setattr(norms, "_NORMS", dict(norms._NORMS))
    monkeypatch.setattr(carriers, "_CARRIERS", dict(carriers._CARRIERS))


class Centre(Norm):
    r"""$y_t = x_t - \bar x$: the cloud's mean removed (a map of the whole cloud, not per token)."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-2, keepdim=True)


class Gain(Norm):
    """$y = w \\odot x$ with a learnable gain when ``elementwise_affine`` (per token)."""

    def __init__(self, config: NormConfig) -> None:
        super().__init__(config)
        self.weight = torch.nn.Parameter(torch.ones(config.dim)) if config.elementwise_affine else None

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.weight is None else x * self.weight


class Uniform(Carrier):
    """Reads no keys and is not softmax: the mean of the values over all keys."""

    uses_keys = False
    softmax = False

    def forward(self, q, k, v, mask, scale, need_stats, causal=False):
        return CarrierOutput(v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.shape[-1]), None, None)


def _lm(**kw) -> LM:
    return tiny_lm(seed=0, vocab_size=7, context=6, dim=4, **kw).double()


def test_a_new_norm_flows_through_by_its_properties(registries, gen):
    register_norm("test_centre", Centre, per_token=False, affine=False)
    register_norm("test_gain", Gain, per_token=True, affine=True)
    assert {"test_centre", "test_gain"} <= set(sweep_variants("norms"))
    # affine: the LM asks for the learnable gain, so the norm owns one parameter per feature
    gain = _lm(norm="test_gain")
    assert [tuple(p.shape) for p in gain.blocks[0].norm1.parameters()] == [(4,)]
    assert list(_lm(norm="test_centre").blocks[0].norm1.parameters()) == []
    # not per token: the LM applies it to the cloud of all B*T states of the batch, not per sequence
    norm = _lm(norm="test_centre").blocks[0].norm1
    x = torch.randn(3, 5, 4, generator=gen, dtype=torch.float64)
    expected = x - x.reshape(-1, 4).mean(0)  # centred over the 15 states together
    torch.testing.assert_close(norm(x), expected, rtol=0, atol=1e-15)
    assert (norm(x) - (x - x.mean(1, keepdim=True))).abs().max() > 1e-2  # not the per-sequence centring


def test_a_new_carrier_flows_through_by_its_properties(registries):
    register_carrier("test_uniform")(Uniform)
    assert "test_uniform" in carrier_names() and "test_uniform" in sweep_variants("carriers")
    model = _lm(carrier="test_uniform")
    reasons = lm_adapter._lacks(SimpleNamespace(lm=model))
    assert set(reasons) == {"attention.softmax"} and "test_uniform" in reasons["attention.softmax"]
    # the hypotheses that need softmax heads are the ones it rules out (E1-E3 and E6 read tensors only)
    softmax = {cls.claim for cls in ESTIMATORS if "attention.softmax" in cls.needs}
    assert {"E4", "E5", "E8"} <= softmax and not softmax & {"E1", "E2", "E3", "E6"}
    # declared softmax: the same probe treats it as softmax attention
    register_carrier("test_softmax")(type("Softmax", (Uniform,), {"softmax": True, "uses_keys": True}))
    assert lm_adapter._lacks(SimpleNamespace(lm=_lm(carrier="test_softmax"))) == {}
    assert lm_adapter._lacks(SimpleNamespace(lm=_lm(carrier="gaussian_mixture")))["attention.softmax"]


def test_built_in_properties():
    expected = {"empirical": (True, True), "gaussian_mixture": (True, False), "mixture_lower_bound": (False, False)}
    for name, properties in expected.items():
        cls = carriers.carrier_class(name)
        assert (cls.uses_keys, cls.softmax) == properties, name
    assert {n: (norms.norm_spec(n).per_token, norms.norm_spec(n).affine) for n in norms.norm_names()} == {
        "identity": (True, False), "layernorm": (True, True), "rmsnorm": (True, True), "sphere": (True, False),
        "whitening": (False, False),
    }


def test_one_carrier_vocabulary():
    """The dynamics operators name their carriers as nn's registry and core's measures do."""
    assert set(DYNAMICS_CARRIERS) <= set(carrier_names())
    assert set(DYNAMICS_CARRIERS) <= set(measure_names())
