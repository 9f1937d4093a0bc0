"""``expattn probe --seeds`` and ``expattn.probe(..., seeds=...)``: one probe per seed, each the same records as a
probe at that seed alone, and each headline's median and range over the seeds; bad seeds are one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import save_tiny

import expattn
from expattn.cli import app

ARGS = {"hypotheses": ("E1", "E5"), "tokens": 192, "seq_len": 32}
TEXT = "Now is the winter of our discontent made glorious summer by this sun of York.\n" * 40


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModel, AutoTokenizer

    folder = save_tiny("bert", tmp_path_factory.mktemp("tiny") / "bert")
    return folder, AutoModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)


def _metrics(records) -> list:
    return [(r.id, r.verdict, r.metrics) for r in records]


def test_api_seeds_are_the_single_seed_probes(tiny, tmp_path):
    _, model, tokenizer = tiny
    runs = expattn.probe(model, tokenizer, texts=TEXT, seeds=[0, 1], **ARGS)
    alone = expattn.probe(model, tokenizer, texts=TEXT, seed=1, **ARGS)
    assert _metrics(runs.runs[1].records) == _metrics(alone.records)
    assert _metrics(runs.runs[0].records) != _metrics(alone.records)  # the seed draws another sample
    e1 = next(s for s in runs.seed_spread if s.id == "E1")
    values = [r.metrics["median_raw_ratio_excl"] for r in (runs.runs[0].records[0], alone.records[0])]
    assert (e1.low, e1.high) == (min(values), max(values)) and e1.median == pytest.approx(sum(values) / 2, rel=1e-12)
    frame = runs.to_frame()
    assert list(frame["id"]) == ["E1", "E5"] and {"seed 0", "seed 1", "verdict 0"} <= set(frame.columns)
    saved = runs.save(tmp_path / "saved")
    assert sorted(p.name for p in saved.iterdir()) == ["seed-0", "seed-1", "seeds.json"]
    with pytest.raises(ValueError, match="seed or seeds"):
        expattn.probe(model, tokenizer, texts=TEXT, seed=0, seeds=[0, 1], **ARGS)


def test_cli_seeds_write_one_folder_per_seed_and_the_spread(tiny, tmp_path):
    folder, _, _ = tiny
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--text", str(text), "--out", str(out),
                                      "--only", "E1,E5", "--tokens", "192", "--seq-len", "32", "--seeds", "0,2"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["seed-0", "seed-2", "seeds.json"]
    doc = json.loads((out / "seeds.json").read_text())
    per_seed = [json.loads((out / f"seed-{s}" / "results.json").read_text())["records"][0] for s in (0, 2)]
    values = [r["metrics"]["median_raw_ratio_excl"] for r in per_seed]
    e1 = doc["hypotheses"][0]
    assert doc["seeds"] == [0, 2] and e1["values"] == values and (e1["min"], e1["max"]) == (min(values), max(values))
    assert "agree" in result.output


@pytest.mark.parametrize(("args", "fragment"), [
    (["--seed", "1", "--seeds", "0,1"], "give --seed or --seeds, not both"),
    (["--seeds", "0"], "--seeds must hold at least two seeds"),
    (["--seeds", "0,0"], "--seeds must not repeat a seed"),
    (["--seeds", "a,b"], "--seeds must be comma-separated integers"),
])
def test_bad_seeds_are_one_line_errors(tmp_path, args, fragment):
    result = CliRunner().invoke(app, ["probe", *args, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def _cli(folder, text, out, *more):
    return CliRunner().invoke(app, ["probe", "--model", str(folder), "--text", str(text), "--out", str(out),
                                    "--only", "E1,E5", "--tokens", "192", "--seq-len", "32", *more])


def test_a_stopped_seeds_run_keeps_its_finished_seeds_and_resume_probes_only_the_others(tiny, tmp_path, monkeypatch):
    from expattn.commands import probe_stages as command

    folder, _, _ = tiny
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    whole = _cli(folder, text, tmp_path / "whole", "--seeds", "0,1,2")
    assert whole.exit_code == 0, whole.output
    run_probe, probed = command.run_probe, []

    def stopping(config, *args, **kwargs):  # the run stops in seed 1, as a killed or failed run would
        probed.append(config.seed)
        if config.seed == 1 and len(probed) == 2:
            raise ValueError("stopped here")
        return run_probe(config, *args, **kwargs)

    monkeypatch.setattr(command, "run_probe", stopping)
    out = tmp_path / "out"
    stopped = _cli(folder, text, out, "--seeds", "0,1,2")
    assert stopped.exit_code == 2 and "stopped here" in stopped.output
    assert sorted(p.name for p in out.iterdir()) == ["seed-0"]  # finished seed kept; no staging, no seeds.json
    kept = (out / "seed-0" / "results.json").read_bytes()
    refused = _cli(folder, text, out, "--seeds", "0,1,2")
    assert refused.exit_code == 2 and "--resume" in refused.output
    other = _cli(folder, text, out, "--seeds", "0,1,2", "--resume", "--seq-len", "48")
    assert other.exit_code == 2 and "seq_len=32" in other.output and "seq_len=48" in other.output
    probed.clear()
    (out / "seed-0.unfinished" / "model").mkdir(parents=True)  # a stop after publishing seed 0, before its clean-up
    resumed = _cli(folder, text, out, "--seeds", "0,1,2", "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert probed == [1, 2]  # seed 0 is read back, not probed again
    assert (out / "seed-0" / "results.json").read_bytes() == kept
    assert sorted(p.name for p in out.iterdir()) == ["seed-0", "seed-1", "seed-2", "seeds.json"]
    for name in ("seeds.json", "seed-1/results.json", "seed-2/results.json"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name


def test_a_run_stopped_among_a_seeds_twins_keeps_the_finished_ones_and_resume_probes_only_the_rest(
        tiny, tmp_path, monkeypatch):
    """A bfloat16 Qwen2.5 1.5B seed beside three twins takes 85 minutes on a two-core CPU: a run stopped in it keeps
    the model's run and each finished twin, and ``--resume`` probes only the twin that was cut short, to the records
    and plots of a run that was never stopped."""
    from expattn.commands import probe_stages
    from expattn.probes import runner

    folder, _, _ = tiny
    text = tmp_path / "text.txt"
    text.write_text(TEXT)
    twins = ("--seeds", "0,1", "--twin", "--twin-inits", "2")
    whole = _cli(folder, text, tmp_path / "whole", *twins)
    assert whole.exit_code == 0, whole.output
    run_probe, twin_records, probed, stopped = probe_stages.run_probe, runner.twin_records, [], []

    def model(config, *args, **kwargs):
        probed.append(("model", config.seed))
        return run_probe(config, *args, **kwargs)

    def twin(subject, config, fed, seed, *args, **kwargs):  # the run stops in seed 1's second twin
        probed.append(("twin", config.seed, seed))
        if (config.seed, seed) == (1, 2) and not stopped:
            stopped.append(seed)
            raise KeyboardInterrupt
        return twin_records(subject, config, fed, seed, *args, **kwargs)

    monkeypatch.setattr(probe_stages, "run_probe", model)
    monkeypatch.setattr(runner, "twin_records", twin)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        probe_stages.probe_seed(_config(folder, text, seed=1), out / "seed-1")
    unfinished = out / "seed-1.unfinished"
    assert sorted(p.name for p in out.iterdir()) == ["seed-1.unfinished"]
    assert {"results.json", "timings.json"} <= {p.name for p in (unfinished / "model").iterdir()}
    assert sorted(p.name for p in unfinished.iterdir()) == ["model", "twin-1.json"]
    kept = json.loads((unfinished / "twin-1.json").read_text())["seconds"]  # counted in the seed's seconds
    model = json.loads((unfinished / "model" / "timings.json").read_text())["seconds"]
    assert probed == [("model", 1), ("twin", 1, 1), ("twin", 1, 2)]
    probed.clear()
    resumed = _cli(folder, text, out, *twins, "--resume")
    assert resumed.exit_code == 0, resumed.output
    assert probed == [("model", 0), ("twin", 0, 0), ("twin", 0, 1), ("twin", 1, 2)]  # seed 1: its second twin only
    assert f"--resume: seed-1: the model's run and twins 1 read back from {unfinished}" in resumed.output
    assert sorted(p.name for p in out.iterdir()) == ["seed-0", "seed-1", "seeds.json"]
    for seed in ("seed-0", "seed-1"):
        assert sorted(p.name for p in (out / seed).iterdir()) == sorted(p.name for p in (tmp_path / "whole" / seed)
                                                                         .iterdir())
    for name in ("seeds.json", "seed-0/results.json", "seed-1/results.json"):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes(), name
    assert kept > 0 and json.loads((out / "seed-1" / "timings.json").read_text())["seconds"] > model + kept
    again = _cli(folder, text, tmp_path / "other", *twins)  # a stop before the model's run is done keeps nothing
    monkeypatch.setattr(probe_stages, "run_probe", lambda *a, **k: (_ for _ in ()).throw(ValueError("stopped")))
    with pytest.raises(ValueError, match="stopped"):
        probe_stages.probe_seed(_config(folder, text, seed=3), tmp_path / "other" / "seed-3")
    assert again.exit_code == 0 and sorted(p.name for p in (tmp_path / "other").iterdir()) == [
        "seed-0", "seed-1", "seeds.json"]


def _config(folder, text, seed):
    from expattn.probes.runner import ProbeConfig

    return ProbeConfig(model=str(folder), text=str(text), hypotheses=("E1", "E5"), tokens=192, seq_len=32, seed=seed,
                       twin=True, twin_inits=2)


@pytest.mark.parametrize("more", [["--seed", "0", "--resume"], ["--seeds", "0,1", "--resume", "--overwrite"]])
def test_resume_needs_seeds_and_not_overwrite(tmp_path, more):
    result = CliRunner().invoke(app, ["probe", *more, "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "--resume goes on with a run of several --seeds" in result.output
    assert list(tmp_path.iterdir()) == []
