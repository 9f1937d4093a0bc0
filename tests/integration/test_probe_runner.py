"""The probe runner on a tiny random BERT saved to disk: determinism, bad input through the CLI
(one line, exit 2, no output folder) and 2-process torchrun statistics and records equal to 1-process ones.

Run as a script (``torchrun ... test_probe_runner.py MODEL_DIR OUT_FILE``) it is the distributed worker.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from expattn.probes.hypotheses import hypotheses
from expattn.probes.runner import ProbeConfig, run_probe


def tiny_bert_dir(root: Path, max_positions: int = 64) -> Path:
    """A 2-layer random BERT with MiniLM's tokenizer, saved as a local HuggingFace directory."""
    from tiny_models import save_tiny  # here: the torchrun worker below runs without the tests' path

    return save_tiny("bert", root / "tiny-bert", seed=1, intermediate_size=48, max_position_embeddings=max_positions)


def tiny_config(path: Path, seed: int = 0) -> ProbeConfig:
    return ProbeConfig(
        model=str(path), tokens=640, seq_len=32, seed=seed, batch_size=4, replicates=20, detail_sequences=2
    )


def statistics(estimators: list) -> dict[str, torch.Tensor]:
    """The merged streaming statistics of a run, by name (float64)."""
    by_claim = {est.claim: est for est in estimators}
    e1, e2, e3, e4, e6, e8, e9 = (by_claim[c] for c in ("E1", "E2", "E3", "E4", "E6", "E8", "E9"))
    out = {
        "e1_sum": e1.stats_.sum_,
        "e1_rep": e1.stats_.rep_sum_,
        "e2_rep": e2.stats_.rep_sum_,
        "e3_rep": e3.boot_.rep_sum_,
        "e8_rep": e8.stats_.rep_sum_,
        "e6_rep": e6.stats_.rep_sum_,
    }
    for d, m in enumerate(e3.kept_):
        out[f"e3_mean_{d}"], out[f"e3_scatter_{d}"], out[f"e3_m4_{d}"] = m.mean_, m.scatter_, m.proj_m4_
    for i, (m, m9) in enumerate(zip(e4.inputs_, e9.inputs_, strict=True)):
        out[f"e4_scatter_{i}"], out[f"e9_scatter_{i}"] = m.scatter_, m9.scatter_
    for i, folds in enumerate(e6.folds_):
        out[f"e6_sxy_{i}"], out[f"e6_sxx_{i}"] = sum(f.sxy_ for f in folds), folds[-1].sxx_
    return {k: v.double().contiguous() for k, v in out.items()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny_bert_dir(tmp_path_factory.mktemp("probe"))


@pytest.mark.parametrize("overlap", [False, True])
def test_progress_names_each_stage_in_order(model_dir, overlap):
    """A callback with a ``stage`` parameter hears loading, then the feeding's tokens up to the total, then each
    hypothesis's analysis by its ID, in order (after all of them measured at once where the updates overlapped
    the forward passes)."""
    heard = []

    def progress(done, total, stage):
        heard.append(stage)

    config = replace(tiny_config(model_dir), hypotheses=("E1", "E5", "E8"))
    run_probe(config, None, progress, speedups=overlap)
    names = [s.name for s in heard]
    assert names[0] == "loading" and names == sorted(names, key=["loading", "feeding", "analyses"].index)
    feeding = [s for s in heard if s.name == "feeding"]
    assert [s.done for s in feeding] == sorted(s.done for s in feeding)
    assert feeding[0].done == 0 and feeding[-1].done == feeding[-1].total == config.tokens
    assert all(s.hypotheses == ("E1", "E5", "E8") for s in feeding)
    analyses = [(s.done, s.total, s.hypotheses) for s in heard if s.name == "analyses"]
    together = [(0, 3, ("E1", "E5", "E8"))] if overlap else []
    assert analyses == [*together, (0, 3, ("E1",)), (1, 3, ("E5",)), (2, 3, ("E8",)), (3, 3, ())]


@pytest.mark.slow
def test_same_seed_same_numbers_other_seed_other_numbers(model_dir, tmp_path):
    first = run_probe(tiny_config(model_dir), tmp_path / "a")
    again = run_probe(tiny_config(model_dir), None)
    other = run_probe(tiny_config(model_dir, seed=1), None)
    assert [r.id for r in first.records] == list(hypotheses())
    for a, b in zip(first.records, again.records, strict=True):
        assert a.metrics == b.metrics
        assert a.verdict == b.verdict
        assert a.verdict in (("pass", "fail") if a.id == "E5" else ("supported", "not_supported", "inconclusive"))
        assert a.controls == b.controls
    assert first.records[0].metrics["median_raw_ratio_excl"] != other.records[0].metrics["median_raw_ratio_excl"]
    assert first.tokens == 640 and first.sequences == 20
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == sorted(p for r in first.records for p in r.plots)


@pytest.mark.slow
def test_same_seed_same_results_file_the_wall_clock_beside_it(model_dir, tmp_path):
    """Two runs at one seed write byte-identical ``results.json``; the wall clock goes to ``timings.json``: each
    hypothesis's update and analysis seconds in its ``timings``."""
    args = ("--model", str(model_dir), "--tokens", "256", "--seq-len", "32", "--detail-sequences", "2", "--seed", "0")
    for name in ("a", "b"):
        result = _cli(*args, "--out", str(tmp_path / name))
        assert result.exit_code in (0, 1), result.output  # 1: a verdict that is not ok, still written
    assert (tmp_path / "a" / "results.json").read_bytes() == (tmp_path / "b" / "results.json").read_bytes()
    for name in ("a", "b"):
        doc = json.loads((tmp_path / name / "results.json").read_text())
        clock = json.loads((tmp_path / name / "timings.json").read_text())
        assert [r["id"] for r in doc["records"]] == list(clock["timings"]) == list(hypotheses())
        assert all(set(t) == {"update_seconds", "result_seconds"} and min(t.values()) >= 0
                   for t in clock["timings"].values())
        assert not [k for r in doc["records"] for k in r["metrics"] if "seconds" in k]


def _cli(*args: str):
    from typer.testing import CliRunner

    from expattn.cli import app

    return CliRunner().invoke(app, ["probe", *args])


def test_bad_input_one_line_exit_2_no_output(model_dir, tmp_path):
    (tmp_path / "nocfg").mkdir()
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00\x81" * 10)
    (tmp_path / "weights.bin").write_bytes(b"not a model")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "bert"}))
    (broken / "model.safetensors").write_bytes(b"garbage")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt"):
        shutil.copy(model_dir / name, broken / name)
    untokenized = tmp_path / "untokenized"
    shutil.copytree(model_dir, untokenized, ignore=shutil.ignore_patterns("*.json", "vocab.txt"))
    (untokenized / "config.json").write_text((model_dir / "config.json").read_text())
    cases = {
        ("--model", "no-such-model"): "neither a built-in name",
        ("--model", str(tmp_path / "nocfg")): "no config.json",
        ("--model", str(tmp_path / "weights.bin")): "is a file",
        ("--model", str(broken)): "cannot load",
        ("--model", str(untokenized), "--seq-len", "32"): "has no tokenizer files",
        ("--model", "no-such-owner/no-such-model"): "nor a HuggingFace model ID in the local cache",
        ("--model", str(untokenized), "--seq-len", "32", "--tokenizer", str(tmp_path / "nocfg")): "no tokenizer files",
        ("--model", str(model_dir), "--seq-len", "32", "--dtype", "float8"): "dtype must be one of",
        ("--model", str(model_dir), "--seq-len", "32", "--device", "cuda:0"): "CUDA is not available"
        if not torch.cuda.is_available() else "seq_len",
        ("--model", str(model_dir), "--seq-len", "32", "--device", "tpu:x"): "device must be cpu, cuda or cuda:N",
        ("--model", str(model_dir), "--seq-len", "32", "--device-map", "balanced"): "device_map must be 'auto'",
        ("--model", str(model_dir), "--seq-len", "32", "--text", str(tmp_path / "empty.txt")): "is empty",
        ("--model", str(model_dir), "--seq-len", "32", "--text", str(tmp_path / "binary.txt")): "not readable UTF-8",
        ("--model", str(model_dir), "--seq-len", "32", "--text", str(tmp_path / "missing.txt")): "not readable",
        ("--model", str(model_dir), "--seq-len", "32", "--tokens", "0"): "tokens must be an integer >= 1",
        ("--model", str(model_dir), "--seq-len", "65"): "exceeds the context length 64",
        ("--model", str(model_dir), "--seq-len", "32", "--memory-budget", "lots"): "memory_budget must be a whole",
        ("--model", str(model_dir), "--seq-len", "32", "--memory-budget", "0GiB"): "memory_budget must be a whole",
        ("--model", str(model_dir), "--seq-len", "32", "--memory-budget", "4KiB"): "needs at least",
    }
    for args, message in cases.items():
        out = tmp_path / "out"
        result = _cli(*args, "--out", str(out))
        assert result.exit_code == 2, (args, result.output)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and message in lines[0], (args, result.output)
        assert "Traceback" not in result.output
        assert not out.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temp leftovers


def fitted_run(config: ProbeConfig) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """The merged statistics (``statistics``) and the records (as ``results.json`` writes them) of a probe run; the
    estimators are read as they reach their analysis (the results keep host numbers only). Rank 0's; ``{}, []``
    on the other ranks, which analyse nothing."""
    from expattn.probes import runner

    fitted: list[list] = []
    analyse = runner.records
    runner.records = lambda estimators, *a, **k: (fitted.append(estimators), analyse(estimators, *a, **k))[1]
    try:
        outcome = run_probe(config, None)
    finally:
        runner.records = analyse
    if not fitted:
        return {}, []
    return statistics(fitted[0]), outcome.document()["records"]


def assert_same_records(two: list[dict], one: list[dict]) -> None:
    """The same records but for the float64 rounding of a different merge order: verdicts, controls' verdicts,
    texts and counts equal; every number within 1e-6 relative (or 1e-9 absolute near zero) of the one process's.
    Observed on the tiny BERT: at most 3e-15 relative, but for E4's and E9's range gaps of ~4e-8 that differ by
    3e-15 (a difference of nearly equal eigenvalues); a batch merged twice or dropped moves these metrics by 1e-3
    or more."""
    assert [r["id"] for r in two] == [r["id"] for r in one]

    def same(a, b, where: str) -> None:
        if isinstance(a, float) and isinstance(b, float):
            assert math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9) or (a != a and b != b), (where, a, b)
        elif isinstance(a, dict) and isinstance(b, dict):
            assert set(a) == set(b), where
            for key in a:
                same(a[key], b[key], f"{where}.{key}")
        elif isinstance(a, list) and isinstance(b, list):
            assert len(a) == len(b), where
            for k, (x, y) in enumerate(zip(a, b, strict=True)):
                same(x, y, f"{where}[{k}]")
        else:
            assert a == b, (where, a, b)

    for a, b in zip(two, one, strict=True):
        same(a, b, a["id"])


@pytest.mark.slow
def test_memory_budget_option_feeds_passes_over_the_same_tokens(model_dir, tmp_path):
    """``--memory-budget`` reaches the run: a budget that holds E3 alone but not E1 and E3 together gives two
    passes (said on stderr and in ``results.json``) and the records of one pass; the size is kept as bytes."""
    from expattn.memory import probe_bytes
    from expattn.probes.footprint import footprint

    hf = json.loads((model_dir / "config.json").read_text())
    defaults = ProbeConfig()
    need = footprint(hf["hidden_size"], hf["num_hidden_layers"], hf["num_attention_heads"], ("E1", "E3"),
                     intermediate=hf["intermediate_size"], batch_size=defaults.batch_size, tokens=256, seq_len=32,
                     detail_sequences=2, replicates=defaults.replicates)
    budget = need.peak(("E3",)) + probe_bytes(256)  # the larger alone fits: one pass each
    assert need.peak() + probe_bytes(256) > budget
    args = ("--model", str(model_dir), "--tokens", "256", "--seq-len", "32", "--detail-sequences", "2", "--only",
            "E1,E3")
    docs = []
    for name, extra in (("one", ()), ("split", ("--memory-budget", f"{budget / 2**10}KiB"))):
        result = _cli(*args, *extra, "--out", str(tmp_path / name))
        assert result.exit_code in (0, 1), result.output  # 1: a verdict that is not ok, still written
        docs.append(json.loads((tmp_path / name / "results.json").read_text()))
    one, split = docs
    assert one["passes"] == [["E1", "E3"]] and split["passes"] == [["E1"], ["E3"]]
    assert split["config"]["memory_budget"] == int(budget) and one["config"]["memory_budget"] is None
    assert split["records"] == one["records"]


@pytest.mark.slow
def test_two_processes_give_the_statistics_and_records_of_one(model_dir, tmp_path):
    """``torchrun --nproc-per-node 2`` on the CPU (gloo): each process feeds half of the batches, rank 0 merges
    and analyses; its statistics and every record's numbers are the one process's."""
    from safetensors.torch import load_file

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # same kernels as the workers, so each batch's forward pass is bitwise the same
    try:
        one, one_records = fitted_run(tiny_config(model_dir))
    finally:
        torch.set_num_threads(threads)
    target = tmp_path / "two.safetensors"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        __file__,
        str(model_dir),
        str(target),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    two = load_file(target)
    assert set(two) == set(one)
    for name, value in one.items():
        # different merge order only: float64 rounding, ~1e-12 relative to the magnitudes involved
        torch.testing.assert_close(two[name], value, rtol=1e-9, atol=1e-9 * float(value.abs().max()), msg=name)
    two_records = json.loads(target.with_suffix(".json").read_text())
    assert_same_records(two_records, one_records)
    moved = json.loads(json.dumps(one_records))  # the control: one metric moved by 1e-4 of itself is told apart
    key = next(k for k, v in moved[0]["metrics"].items() if isinstance(v, float) and abs(v) > 1e-3)
    moved[0]["metrics"][key] *= 1 + 1e-4
    with pytest.raises(AssertionError):
        assert_same_records(moved, one_records)


if __name__ == "__main__":
    from safetensors.torch import save_file

    fitted, written = fitted_run(tiny_config(Path(sys.argv[1])))
    if int(os.environ.get("RANK", "0")) == 0:
        save_file(fitted, sys.argv[2])
        Path(sys.argv[2]).with_suffix(".json").write_text(json.dumps(written))
    torch.distributed.destroy_process_group()


def test_sequence_windows_longer_than_the_context_do_not_warn(capfd):
    """The sample tokenizes a window of 12 characters per kept token, which on terse text exceeds the
    model's 512-token limit; only the first tokens are kept, so HuggingFace's warning about running such
    a sequence through the model would be false and must not reach the user."""
    from transformers import AutoTokenizer

    from expattn.probes.models.corpus import TokenSample, sequence
    from expattn.probes.models.loading import minilm_dir

    tokenizer = AutoTokenizer.from_pretrained(str(minilm_dir()))
    text = "a b c d e f g h " * 2000  # one token per 2 characters: a 1,600-character window gives ~800 tokens
    assert len(tokenizer(text[:1600], add_special_tokens=False, verbose=False)["input_ids"]) > 512
    ids = sequence(text, tokenizer, "bert", TokenSample(128, 0), 0)
    assert ids.shape == (128,)
    assert "longer than the specified maximum" not in capfd.readouterr().err
