"""``footprint.statistics_bytes`` against the storage a tiny model's probe actually holds after its run.

The measurement walks each fitted estimator's attributes (lists, dicts, statistics objects) and sums the
bytes of the distinct tensor storages and numpy arrays it reaches, leaving out the shared context
(``ctx``: the model and its weights). A view that kept a larger tensor alive counts its whole storage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parents[1]))
from tiny_models import build_tiny, save_tiny

import expattn
from expattn.probes.footprint import statistics_bytes
from expattn.probes.hypotheses import hypotheses

SEQUENCES, SEQ_LEN, REPLICATES = 48, 32, 20  # 48 x 31 kept tokens: more than E3's buffer of 1024


def held_bytes(obj: object, seen: set | None = None) -> int:
    """Bytes of the distinct tensor storages and numpy arrays reachable from ``obj`` (but not its ``ctx``)."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        storage = obj.untyped_storage()
        key = ("tensor", storage.data_ptr(), obj.device)
        if key in seen or storage.nbytes() == 0:
            return 0
        seen.add(key)
        return storage.nbytes()
    if isinstance(obj, np.ndarray):
        base = obj if obj.base is None else obj.base
        if ("array", id(base)) in seen:
            return 0
        seen.add(("array", id(base)))
        return base.nbytes
    if isinstance(obj, list | tuple | set):
        return sum(held_bytes(x, seen) for x in obj)
    if isinstance(obj, dict):
        return sum(held_bytes(x, seen) for x in obj.values())
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        if id(obj) in seen:
            return 0
        seen.add(id(obj))
        return sum(held_bytes(v, seen) for k, v in vars(obj).items() if k != "ctx")
    return 0


def fitted_estimators(monkeypatch) -> list:
    """The estimators a run fits, as they reach their analysis (the results keep only the figures' numbers)."""
    from expattn.probes import runner

    fitted: list = []

    def keep(estimators, *args, **kwargs):
        fitted.extend(estimators)
        return records(estimators, *args, **kwargs)

    records = runner.records
    monkeypatch.setattr(runner, "records", keep)
    return fitted


SHAPES = {  # the tiny defaults (width 32, 4 heads, 2 layers); another width, depth and head count, with biases
    "llama": ("llama", {}),
    "bert": ("bert", {"hidden_size": 48, "num_attention_heads": 6, "num_hidden_layers": 3}),
}


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "statistics", "hypotheses"), [
    ("llama", "float64", hypotheses()), ("llama", "float32", hypotheses()), ("llama", "float64", ("E5",)),
    ("bert", "float64", hypotheses()), ("bert", "float32", ("E3", "E4", "E6")),
])
def test_statistics_bytes_equal_what_a_run_holds(shape, statistics, hypotheses, monkeypatch):
    model_type, overrides = SHAPES[shape]
    model = build_tiny(model_type, **overrides)
    ids = torch.randint(1000, 2000, (SEQUENCES, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    fitted = fitted_estimators(monkeypatch)
    expattn.probe(model, input_ids=ids, hypotheses=hypotheses, replicates=REPLICATES, batch_size=16,
                  detail_sequences=4, statistics=statistics)
    measured = {est.claim: held_bytes(est) for est in fitted}
    cfg = model.config
    expected = statistics_bytes(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, hypotheses,
                                tokens=SEQUENCES * SEQ_LEN, seq_len=SEQ_LEN, detail_sequences=4,
                                replicates=REPLICATES, statistics=statistics)
    assert measured == expected  # every estimator, byte for byte (E3's buffer is full at these sizes)
    scatter = {e.claim: e for e in fitted}.get("E4")
    if scatter is not None:  # the option reached the accumulators
        assert scatter.inputs_[0].scatter_.dtype == getattr(torch, statistics)


@pytest.mark.slow
def test_a_twins_run_holds_what_statistics_bytes_of_a_deciding_run_says(monkeypatch):
    """A random-init twin's run measures only what decides each verdict (``ProbeContext.deciding``): E4 and E9 keep
    no detail sequences for the Fisher readings, and the footprint it is planned with says so, byte for byte."""
    from expattn.probes.models.subject import subject_from_model
    from expattn.probes.runner import ProbeConfig, probe_subject

    model = build_tiny("llama")
    ids = torch.randint(1000, 2000, (SEQUENCES, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    fitted = fitted_estimators(monkeypatch)
    config = ProbeConfig(model="tiny", tokens=ids.numel(), seq_len=SEQ_LEN, replicates=REPLICATES, batch_size=16,
                         detail_sequences=4)
    probe_subject(subject_from_model(model, None), config, None, input_ids=ids, deciding=True)
    measured = {est.claim: held_bytes(est) for est in fitted}
    cfg = model.config
    sizes = {"tokens": SEQUENCES * SEQ_LEN, "seq_len": SEQ_LEN, "detail_sequences": 4, "replicates": REPLICATES}
    expected = statistics_bytes(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, hypotheses(),
                                deciding=True, **sizes)
    full = statistics_bytes(cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads, hypotheses(), **sizes)
    assert measured == expected
    assert {h for h in full if full[h] != expected[h]} == {"E4", "E9"} and expected["E4"] < full["E4"]


@pytest.mark.slow
def test_a_probe_whose_statistics_do_not_fit_is_refused_with_the_number_and_the_options(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from expattn.cli import app

    folder = save_tiny("llama", tmp_path / "llama")
    text = tmp_path / "text.txt"
    text.write_text("Now is the winter of our discontent made glorious summer by this sun of York.\n" * 40)
    # 200 KiB free: room for the token ids (3 KiB) and for E1 and E2 (9 KiB), not for E3-E8 (about 0.8 MiB)
    monkeypatch.setattr("expattn.memory.available_bytes", lambda device: 200 * 2**10)
    args = ["probe", "--model", str(folder), "--text", str(text), "--tokens", "192", "--seq-len", "32"]
    refused = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "all")])
    assert refused.exit_code == 2, refused.output
    lines = [line for line in refused.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), refused.output
    for fragment in ("alone (its statistics", "but only 0.2 MiB is available within the free memory of cpu",
                     "--statistics float32", "out (--only)"):
        assert fragment in " ".join(refused.output.split()), refused.output
    assert not (tmp_path / "all").exists()
    # 4 MiB: the batch's activations (1.2 MiB at these sizes) and E1's and E2's statistics, not E3-E9 together
    monkeypatch.setattr("expattn.memory.available_bytes", lambda device: 4 * 2**20)
    ok = CliRunner().invoke(app, [*args, "--only", "E1,E2", "--out", str(tmp_path / "some")])
    assert ok.exit_code == 0, ok.output


@pytest.mark.slow
def test_cli_statistics_option(tmp_path):
    from typer.testing import CliRunner

    from expattn.cli import app

    folder = save_tiny("llama", tmp_path / "llama")
    text = tmp_path / "text.txt"
    text.write_text("Now is the winter of our discontent made glorious summer by this sun of York.\n" * 40)
    args = ["probe", "--model", str(folder), "--text", str(text), "--tokens", "192", "--seq-len", "32", "--only", "E4"]
    bad = CliRunner().invoke(app, [*args, "--statistics", "float16", "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and bad.output.strip().startswith("error:"), bad.output
    assert "statistics must be one of float64, float32, got 'float16'" in " ".join(bad.output.split())
    assert not (tmp_path / "bad").exists()
    runs = {}
    for dtype in ("float64", "float32"):
        out = tmp_path / dtype
        ran = CliRunner().invoke(app, [*args, "--statistics", dtype, "--out", str(out)])
        assert ran.exit_code == 0, ran.output
        document = json.loads((out / "results.json").read_text())
        assert document["config"]["statistics"] == dtype
        runs[dtype] = document["records"][0]
    # E4's cosines are float32 in both cases (accurate to ~1e-4 relative): the float32 scatter (rounding ~6e-8 of
    # each entry) moves the Sigma readings by no more than that (seen: 1e-9), but the Fisher-inverse readings more:
    # the inverse amplifies the Fisher's rounding by up to its condition number, which the ridge bounds by 100 D + 1.
    # Their margins, differences of two cosines, may sit near 0 (the own-head margin's upper end, ~1e-6), where a
    # relative bound says nothing: 1e-4 absolute, the cosines' own precision (seen: up to 1.7e-6, on one machine's BLAS
    # more than another's). The deflated ones project out the eigen-directions of each head's smallest Fisher
    # eigenvalues, separated by gaps of the order of the ridge (1% of the mean eigenvalue), which turns the same
    # perturbation into up to 100 times more (seen: 1.2e-4): 1e-3 absolute, a thirtieth of the widths of the intervals
    # that decide (about 0.03)
    metrics = [runs[d]["metrics"] for d in runs]
    assert metrics[0].keys() == metrics[1].keys() and runs["float32"]["verdict"] == runs["float64"]["verdict"]

    def absolute(key: str) -> float:
        if key.startswith("deflated_margin_fisher_inv"):
            return 1e-3
        return 1e-4 if "fisher_inv" in key else 1e-6

    off = {key: (value, metrics[1][key]) for key, value in metrics[0].items()
           if metrics[1][key] != pytest.approx(value, rel=1e-4, abs=absolute(key))}
    assert not off, off
