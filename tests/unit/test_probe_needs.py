"""What each hypothesis needs from a model (block tensors, capabilities) and what the model reading offers: the
runner matches the two."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import pytest
import torch
from tiny_models import build_tiny

from expattn.probes.hypotheses import ESTIMATORS
from expattn.probes.models.generic import STREAM
from expattn.probes.models.subject import subject_from_model
from expattn.probes.runner import ProbeConfig, probe_subject


def _read_names(cls) -> set[str]:
    """The literal names an estimator's module reads as ``tensors["name"]``, and ``input`` where it calls
    ``kept_weights`` (which reads it)."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(cls)))
    names = {node.slice.value for node in ast.walk(tree)
             if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "tensors"
             and isinstance(node.slice, ast.Constant)}
    calls = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return names | ({"input"} if "kept_weights" in calls else set())


def test_every_estimator_declares_the_tensors_it_reads():
    for cls in ESTIMATORS:
        assert cls.tensors, cls.claim
        assert _read_names(cls) <= set(cls.tensors), (cls.claim, _read_names(cls) - set(cls.tensors))
        assert set(cls.tensors) <= STREAM | {f"{n}.{e}" for n in ("norm1", "norm2") for e in ("input", "output")}


def test_a_hypothesis_whose_tensor_is_not_offered_is_skipped_with_the_reason():
    model = build_tiny("llama")
    subject = subject_from_model(model, None)
    offered = subject.adapter.offered(model)
    assert {"mlp.skip", "norm2.input"} <= offered  # a Llama block has both norms and an MLP skip
    subject = dataclasses.replace(subject, adapter=dataclasses.replace(
        subject.adapter, offers=lambda m: offered - {"mlp.skip"}))
    ids = torch.randint(0, 1000, (8, 32), generator=torch.Generator().manual_seed(0))
    config = ProbeConfig(model="llama", tokens=ids.numel(), seq_len=32, batch_size=4, replicates=20,
                         detail_sequences=4, hypotheses=("E1", "E6"))
    records = {r.id: r for r in probe_subject(subject, config, None, input_ids=ids, speedups=False).records}
    assert records["E6"].verdict == "skipped" and "hands over no mlp.skip" in records["E6"].notes
    assert records["E1"].verdict not in ("skipped", "error")  # what it needs is there


def test_a_capability_the_reading_lacks_skips_the_hypotheses_that_need_it_with_its_reason():
    model = build_tiny("llama")
    subject = subject_from_model(model, None)
    assert "attention.softmax" in subject.adapter.offered(model)
    subject = dataclasses.replace(subject, adapter=dataclasses.replace(
        subject.adapter, lacks=lambda m: {"attention.softmax": "the heads are not a softmax here"}))
    assert "attention.softmax" not in subject.adapter.offered(model)
    ids = torch.randint(0, 1000, (4, 16), generator=torch.Generator().manual_seed(0))
    config = ProbeConfig(model="llama", tokens=ids.numel(), seq_len=16, batch_size=4, replicates=20,
                         detail_sequences=2, hypotheses=("E1", "E8"))
    records = {r.id: r for r in probe_subject(subject, config, None, input_ids=ids, speedups=False).records}
    assert records["E8"].verdict == "skipped" and records["E8"].notes.endswith("the heads are not a softmax here")
    assert records["E1"].verdict not in ("skipped", "error")  # it reads tensors only


def test_a_reading_that_lacks_an_unknown_capability_is_refused():
    model = build_tiny("llama")
    adapter = dataclasses.replace(subject_from_model(model, None).adapter, lacks=lambda m: {"softmax": "typo"})
    with pytest.raises(ValueError, match="lacks unknown capability 'softmax'"):
        adapter.offered(model)
