"""A tiny model probed beside its random-init twin: the twin is the same class and config initialised under the seed,
it reads exactly the trained model's token ids, and every record carries its verdict and a training class."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent.parent))
from tiny_models import build_tiny, minilm_tokenizer_dir, save_tiny, tiny_lm

import expattn
from expattn.cli import app
from expattn.probes.config import DEFAULTS
from expattn.probes.models.lm_adapter import ProbedLM
from expattn.probes.models.twin import twin_model
from expattn.results.record import TRAINING, load_records

SIZES = {"tokens": 256, "seq_len": 32, "replicates": 20, "detail_sequences": 4}


def _tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(minilm_tokenizer_dir()))


@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_the_twin_is_the_architecture_at_the_seeded_initialisation(model_type):
    trained = build_tiny(model_type, seed=5)
    before = torch.random.get_rng_state()
    twin = twin_model(trained, seed=0)
    assert torch.equal(torch.random.get_rng_state(), before)  # the global random state is left as it was
    expected = build_tiny(model_type, seed=0)  # AutoModel.from_config of the same config under manual_seed(0)
    assert type(twin) is type(trained) and not twin.training
    ours, theirs, original = twin.state_dict(), expected.state_dict(), trained.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert any(not torch.equal(ours[k], original[k]) for k in ours)


def test_the_twin_of_an_expattn_lm_is_its_step_zero():
    trained = ProbedLM(tiny_lm(seed=4))
    torch.manual_seed(1)
    expected = tiny_lm()  # the trainer's LM(cfg) right after torch.manual_seed(seed)
    twin = twin_model(trained, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(twin.lm.state_dict().values(), expected.state_dict().values(),
                                                 strict=True))


def _fed(monkeypatch, cls) -> dict[int, list[torch.Tensor]]:
    """Every ``input_ids`` a model of ``cls`` is called with, by model instance."""
    fed: dict[int, list[torch.Tensor]] = {}
    forward = cls.forward

    def recording(self, *args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            fed.setdefault(id(self), []).append(ids.clone())
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(cls, "forward", recording)
    return fed


@pytest.mark.slow
def test_every_record_carries_its_twin_fed_the_same_ids(monkeypatch):
    model = build_tiny("bert", seed=5)
    fed = _fed(monkeypatch, type(model))
    tokenizer = _tokenizer()
    calls, encode = [], type(tokenizer).__call__
    monkeypatch.setattr(type(tokenizer), "__call__", lambda self, *a, **k: calls.append(1) or encode(self, *a, **k))
    released = []
    monkeypatch.setattr("expattn.probes.runner.release_heap", lambda: released.append(1))
    res = expattn.probe(model, tokenizer, twin=True, seed=2, **SIZES)
    assert len(calls) == SIZES["tokens"] // SIZES["seq_len"]  # each sequence tokenised once, the twins included
    assert len(released) == DEFAULTS.twin_inits  # the heap given back before each twin is built
    trained = torch.cat(fed.pop(id(model)))
    twins = [torch.cat(ids) for ids in fed.values()]  # the other instances: one twin per initialisation
    assert trained.shape == (SIZES["tokens"] // SIZES["seq_len"], SIZES["seq_len"])  # each sequence once
    assert len(twins) == DEFAULTS.twin_inits == 3 and all(torch.equal(twin, trained) for twin in twins)
    for record in res.records:
        controls = [c for c in record.controls if c.kind == "twin"]
        assert [c.name for c in controls] == [f"random-init twin, seed {s}" for s in (2, 3, 4)], record.id
        assert record.details["twins"]["seeds"] == [2, 3, 4]
        assert record.training in TRAINING and "random-init twins by seed: 2: " in record.notes


@pytest.mark.slow
def test_cli_twin_writes_the_classification(tmp_path):
    folder = save_tiny("gpt2", tmp_path / "gpt2")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--out", str(out), "--only", "E1,E5",
                                      "--tokens", "128", "--seq-len", "32", "--twin", "--twin-inits", "2"])
    assert result.exit_code == 0, result.output
    records = load_records(out / "results.json")
    assert [r.id for r in records] == ["E1", "E5"]
    assert all(r.training in TRAINING and [c.kind for c in r.controls[-2:]] == ["twin"] * 2 for r in records)
    plain = tmp_path / "plain"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--out", str(plain), "--only", "E1",
                                      "--tokens", "128", "--seq-len", "32"])
    assert result.exit_code == 0 and load_records(plain / "results.json")[0].training is None


def test_the_command_releases_the_models_weights_before_its_twins_and_measures_the_same(tmp_path, monkeypatch):
    """``run_probe`` loaded the model itself: its weights go to the ``meta`` device before its twins are built on the
    model's device, and every record, twin controls included, is what the same run keeping the weights gives."""
    from expattn.probes import runner
    from expattn.probes.runner import ProbeConfig, run_probe

    config = ProbeConfig(model=str(save_tiny("llama", tmp_path / "llama")), hypotheses=("E1", "E7"), tokens=128,
                         seq_len=32, twin=True, twin_inits=1, replicates=20)
    seen, twin_records = [], runner.twin_records

    def watched(subject, *args, **kwargs):
        seen.append((next(subject.model.parameters()).device.type, kwargs["device"].type))
        return twin_records(subject, *args, **kwargs)

    monkeypatch.setattr(runner, "twin_records", watched)
    released = run_probe(config, None).records
    monkeypatch.setattr(runner, "release_weights", lambda *a: None)
    kept = run_probe(config, None).records
    assert seen == [("meta", "cpu"), ("cpu", "cpu")]
    assert [(r.id, r.verdict, r.training, r.metrics, [c.metrics for c in r.controls]) for r in released] == [
        (r.id, r.verdict, r.training, r.metrics, [c.metrics for c in r.controls]) for r in kept]
    assert all(r.controls[-1].kind == "twin" and r.controls[-1].verdict not in ("error", "skipped") for r in released)


@pytest.mark.slow
def test_a_twin_that_fails_is_an_error_and_the_command_exits_1(tmp_path, monkeypatch):
    def broken(subject, seed, device=None):
        raise RuntimeError("no initialiser for this architecture")

    monkeypatch.setattr("expattn.probes.models.twin.twin_subject", broken)
    folder = save_tiny("gpt2", tmp_path / "gpt2")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--out", str(out), "--only", "E1",
                                      "--tokens", "128", "--seq-len", "32", "--twin"])
    assert result.exit_code == 1, result.output
    (record,) = load_records(out / "results.json")  # the trained model's record stands, its twin control errs
    assert record.verdict != "error" and record.controls[-1].verdict == "error" and record.training == "undecided"
    assert "no initialiser for this architecture" in record.notes


def test_twin_must_be_a_boolean_and_twin_inits_a_count():
    with pytest.raises(TypeError, match="twin must be True or False"):
        expattn.probe(build_tiny("bert"), _tokenizer(), twin="yes", **SIZES)
    with pytest.raises(ValueError, match="twin_inits must be an integer >= 1, got 0"):
        expattn.probe(build_tiny("bert"), _tokenizer(), twin=True, twin_inits=0, **SIZES)


@pytest.mark.slow
def test_the_replays_copies_in_other_dtypes_are_dropped_before_its_twins_run(monkeypatch):
    """A model read through replays of its attention modules (Qwen2 here) gets copies of them in float32 (for its
    context) and float64 (E5, E7) during its run; they go with the run, not with the model while its twins run."""
    from expattn.probes import runner
    from expattn.probes.models.taps import Replay

    copies_at_twin = []

    def twin_records(subject, config, fed, seed, speedups=None, device=None):
        layers = subject.model.config.num_hidden_layers
        replays = [subject.adapter.attention(subject.model, i).qkv for i in range(layers)]
        assert all(isinstance(r, Replay) for r in replays)
        copies_at_twin.append(sum(len(r._copies) for r in replays))
        return []

    forget = Replay.forget
    forgotten = []
    monkeypatch.setattr(Replay, "forget", lambda self: forgotten.append(len(self._copies)) or forget(self))
    monkeypatch.setattr(runner, "twin_records", twin_records)
    monkeypatch.setattr(runner, "attach_twin", lambda records, *a: records)
    model = build_tiny("qwen2", seed=5).to(torch.bfloat16)
    res = expattn.probe(model, _tokenizer(), twin=True, twin_inits=1, seed=2, hypotheses="E5,E7", **SIZES)
    assert copies_at_twin == [0] and res.records
    assert sum(forgotten) >= model.config.num_hidden_layers  # there were copies to drop: the float32 ones at least


def test_the_models_attention_copies_are_freed_before_its_twins_run(monkeypatch):
    """A twin is probed while the model is held; the model's own context (its float32 copies of the attention
    weights, 0.57 GiB for the bfloat16 Qwen2.5 1.5B) is not, so the twin's room is the model's weights, not more."""
    import gc
    import weakref

    from expattn.probes import runner

    made, alive_at_twin = [], []
    context = runner.context
    monkeypatch.setattr(runner, "context", lambda *a, **k: made.append(context(*a, **k)) or made[-1])

    def twin_records(subject, config, fed, seed, speedups=None, device=None):
        refs = [weakref.ref(made.pop(0))] if made else []
        gc.collect()
        alive_at_twin.append([r() is not None for r in refs])
        return []

    monkeypatch.setattr(runner, "twin_records", twin_records)
    monkeypatch.setattr(runner, "attach_twin", lambda records, *a: records)
    model = build_tiny("bert", seed=5)
    res = expattn.probe(model, _tokenizer(), twin=True, twin_inits=1, seed=2, hypotheses="E1,E7", **SIZES)
    assert alive_at_twin == [[False]] and res.records


def test_a_twin_measures_what_decides_its_verdicts_alone_and_they_are_the_full_runs(monkeypatch):
    """A twin control reads its run's verdict and headline number only: the twin's run leaves out the readings
    reported beside a verdict (E4's and E9's Fisher readings, each head's Fisher and its decomposition: most of E4's
    analysis on a wide model; E7's skip path), and every verdict and headline is what the full run gives."""
    from expattn.catalogue import headlines
    from expattn.probes.hypotheses import e4_alignment
    from expattn.probes.models.subject import subject_from_model
    from expattn.probes.runner import ProbeConfig, probe_subject

    subject = subject_from_model(build_tiny("llama", seed=3), None)
    config = ProbeConfig(model="tiny", **SIZES)
    ids = torch.randint(0, 30_522, (SIZES["tokens"] // SIZES["seq_len"], SIZES["seq_len"]),
                        generator=torch.Generator().manual_seed(0))
    fisher_targets, decomposed = e4_alignment.fisher_targets, []

    def counted(*args, **kwargs):
        decomposed.append(args[0].shape)
        return fisher_targets(*args, **kwargs)

    monkeypatch.setattr(e4_alignment, "fisher_targets", counted)
    full = probe_subject(subject, config, None, input_ids=ids).records
    layers = len(decomposed)
    assert layers == 2  # one per layer, shared by E4 and E9
    deciding = probe_subject(subject, config, None, input_ids=ids, deciding=True).records
    assert len(decomposed) == layers  # none in the twin's run
    heads = headlines()
    assert [r.id for r in deciding] == [r.id for r in full] == [f"E{i}" for i in range(1, 10)]
    for mine, theirs in zip(deciding, full, strict=True):
        key = heads[mine.id][0]
        assert (mine.verdict, mine.metrics.get(key)) == (theirs.verdict, theirs.metrics.get(key)), mine.id
        assert mine.verdict not in ("error", "skipped"), (mine.id, mine.notes)
    by_id, whole = {r.id: r for r in deciding}, {r.id: r for r in full}
    assert "decades_lost_skip" in whole["E7"].metrics and "decades_lost_skip" not in by_id["E7"].metrics
    assert "mean_margin_fisher_inv" in whole["E4"].metrics
    assert not any("fisher" in key for key in by_id["E4"].metrics if key not in ("fisher_heads_clipped",
                                                                                  "fisher_unconverged",
                                                                                  "fisher_sequences"))
