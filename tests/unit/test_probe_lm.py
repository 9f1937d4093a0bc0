"""The probe on expattn's own LMs: exported folders, per-depth capture (tied, implicit), E1/E2 numbers
against an independent float64 computation from the LM's hook points, hypothesis selection, errors."""

from __future__ import annotations

import copy
import itertools
import json

import numpy as np
import pytest
import torch
from tiny_models import spread_weights, tiny_lm
from typer.testing import CliRunner

from expattn.cli import app
from expattn.nn.export import MODEL_TYPE, export_model
from expattn.nn.hooks import cached
from expattn.nn.lm import LM
from expattn.probes.models.adapters import Capture, adapter_for
from expattn.probes.models.corpus import TokenSample, load_text, sequence
from expattn.probes.models.lm_adapter import CharTokenizer, load_lm
from expattn.probes.models.loading import read_config
from expattn.probes.runner import ProbeConfig, run_probe

VOCAB = "\n abcdefgh"


@pytest.fixture
def text(gen, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(VOCAB[i] for i in torch.randint(0, len(VOCAB), (6000,), generator=gen).tolist()))
    return path


def _model(gen, **kw) -> LM:
    """A random LM whose sublayers change the states visibly (the default init makes updates tiny)."""
    return spread_weights(tiny_lm(vocab_size=len(VOCAB), context=16, layers=3, dim=16, **kw), gen)


def _spread(x: torch.Tensor) -> torch.Tensor:
    """Per sequence: mean squared distance of the tokens to their centroid, (batch,)."""
    return (x - x.mean(1, keepdim=True)).pow(2).sum(-1).mean(1)


def test_e1_e2_match_float64_trace(gen, text, tmp_path):
    model = _model(gen)
    folder = export_model(model, VOCAB, tmp_path / "model")
    seq_len, n_seq = 16, 24
    config = ProbeConfig(model=str(folder), text=str(text), tokens=seq_len * n_seq, seq_len=seq_len, batch_size=8,
                         replicates=20, hypotheses=("E1", "E2"))
    records = {r.id: r for r in run_probe(config, None).records}
    assert set(records) == {"E1", "E2"}
    tokenizer = CharTokenizer(VOCAB)
    ids = torch.stack([sequence(load_text(None, text), tokenizer, "expattn", TokenSample(seq_len, 0), i)
                       for i in range(n_seq)])
    ref = model.double()
    with torch.no_grad(), cached(ref.hook_points().values()) as trace:
        ref(ids)
    e1, e2 = records["E1"].details, records["E2"].details
    for i, block in enumerate(ref.layer_blocks()):
        x, n1, h = (trace[f"blocks.{i}.{n}"][:, 1:] for n in ("input", "norm1.output", "attn.residual"))
        with torch.no_grad():
            n2 = block.norm2(trace[f"blocks.{i}.attn.residual"])[:, 1:]  # per-token layernorm: position 0 irrelevant
        e1_raw = _spread(h).mean() / _spread(x).mean()
        msn = lambda t: t.pow(2).sum(-1).mean(1).mean()  # noqa: E731
        e2_norm1 = (_spread(n1).mean() / msn(n1)) / (_spread(x).mean() / msn(x))
        e2_norm2_raw = _spread(n2).mean() / _spread(h).mean()
        # the probe runs the model in float32 (relative error ~1e-6 after three blocks) and rounds to six
        # significant digits (5e-7): 1e-4 relative leaves room for both and rejects any other statistic
        assert e1["raw_ratio_excl"]["estimate"][i] == pytest.approx(float(e1_raw), rel=1e-4)
        assert e2["norm1_normalized_ratio_excl"]["estimate"][i] == pytest.approx(float(e2_norm1), rel=1e-4)
        assert e2["norm2_raw_ratio_excl"]["estimate"][i] == pytest.approx(float(e2_norm2_raw), rel=1e-4)
    assert max(abs(v - 1) for v in e1["raw_ratio_excl"]["estimate"]) > 1e-2  # the updates are not negligible


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "sphere", "whitening"])
def test_e7_paths_match_the_lm_modules_in_float64(gen, text, tmp_path, norm):
    model = _model(gen, norm=norm)
    folder = export_model(model, VOCAB, tmp_path / "model")
    seq_len, detail = 16, 3
    config = ProbeConfig(model=str(folder), text=str(text), tokens=seq_len * 8, seq_len=seq_len, batch_size=4,
                         replicates=20, detail_sequences=detail, hypotheses=("E7",))
    (record,) = run_probe(config, None).records
    assert record.verdict != "skipped", record.notes
    ids = torch.stack([sequence(load_text(None, text), CharTokenizer(VOCAB), "expattn", TokenSample(seq_len, 0), i)
                       for i in range(detail)])
    with torch.no_grad():
        x0 = (model.tok(ids) + model.pos(torch.arange(seq_len))).double()  # the float32 embeddings the probe sees
        ref = copy.deepcopy(model).double()
        plain, skip, curves, per_sequence = x0, x0, {"no_skip": [], "skip": []}, {"no_skip": [], "skip": []}
        for block in [None, *ref.layer_blocks()]:
            if block is not None:  # the model's own modules, causal softmax attention of the empirical carrier
                plain = block.attn(block.norm1(plain))
                skip = skip + block.attn(block.norm1(skip))
            for name, x in (("no_skip", plain), ("skip", skip)):
                res = (x - x.mean(1, keepdim=True)).norm(dim=(1, 2)) / x.norm(dim=(1, 2))
                curves[name].append(float(res.median()))
                per_sequence[name].append(res)
    for name in ("no_skip", "skip"):
        # both sides float64 from the same float32 embeddings; the probe rounds to six significant digits
        np.testing.assert_allclose(record.details[f"res_{name}"][0], curves[name], rtol=2e-6)
        # the headline: decades lost from depth 0 to the last layer, mean over sequences (positive when res falls)
        lost = float(-(per_sequence[name][-1] / per_sequence[name][0]).log10().mean())
        assert record.metrics[f"decades_lost_{name}"] == pytest.approx(lost, rel=1e-5, abs=1e-9)
    assert record.metrics["decades_lost_no_skip"] > 0
    assert curves["no_skip"][-1] < 0.9 * curves["no_skip"][0]  # the path does move: the comparison has teeth


def test_e7_is_skipped_for_implicit_and_non_softmax_lms(gen, text, tmp_path):
    for kw, fragment in (({"implicit": True}, "fixed point"), ({"carrier": "gaussian_mixture"}, "gaussian_mixture")):
        folder = export_model(_model(gen, **kw), VOCAB, tmp_path / next(iter(kw)))
        config = ProbeConfig(model=str(folder), text=str(text), tokens=64, seq_len=16, batch_size=4,
                             replicates=20, hypotheses=("E7",))
        (record,) = run_probe(config, None).records
        assert record.verdict == "skipped" and fragment in record.notes


@pytest.mark.parametrize("kw", [{"tied_layers": True}, {"implicit": True}])
def test_one_handover_per_depth(gen, text, tmp_path, kw):
    model = _model(gen, **kw)
    if kw.get("implicit"):
        with torch.no_grad():  # a contraction, so the fixed-point iteration converges
            for block in model.blocks:
                block.attn.out_proj.weight.mul_(0.1)
                block.mlp.out_proj.weight.mul_(0.1)
    folder = export_model(model, VOCAB, tmp_path / "model")
    wrapped, _ = load_lm(folder, read_config(folder))
    ids = torch.randint(0, len(VOCAB), (3, 16), generator=gen)
    seen: list[tuple[int, dict]] = []
    with torch.no_grad(), Capture(wrapped, adapter_for(MODEL_TYPE), lambda i, t: seen.append((i, t))):
        wrapped(input_ids=ids)
    assert [i for i, _ in seen] == [0, 1, 2]
    with torch.no_grad(), cached(model.hook_points().values()) as trace:
        model(ids)
    for i, t in seen:
        assert set(t) == {"input", "norm1.input", "norm1.output", "attn.input", "attn.heads", "attn.output",
                          "attn.residual", "norm2.input", "norm2.output", "mlp.input", "mlp.output", "mlp.skip",
                          "output"}
        for name in ("input", "norm1.output", "attn.residual", "output"):
            torch.testing.assert_close(t[name], trace[f"blocks.{i}.{name}"], rtol=0, atol=0)
        torch.testing.assert_close(t["attn.residual"], t["input"] + t["attn.output"])  # float32 sum: default tol
        torch.testing.assert_close(t["output"], t["attn.residual"] + t["mlp.output"])
    if kw.get("implicit"):  # norm1 reads the fixed point z*, which is the next depth's input
        for (_, t), (_, nxt) in itertools.pairwise(seen):
            torch.testing.assert_close(t["norm1.input"], nxt["input"], rtol=0, atol=0)
            assert not torch.equal(t["norm1.input"], t["input"])
    else:
        for _, t in seen:
            torch.testing.assert_close(t["norm1.input"], t["input"], rtol=0, atol=0)


def test_export_roundtrip_and_bad_folders(gen, tmp_path):
    model = _model(gen, carrier="gaussian_mixture", norm="rmsnorm")
    folder = export_model(model, VOCAB, tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPE and config["n_positions"] == 16 and config["vocab"] == VOCAB
    wrapped, tokenizer = load_lm(folder, config)
    ids = torch.tensor([tokenizer("abc\nhg", add_special_tokens=False)["input_ids"]])
    assert ids.tolist() == [[VOCAB.index(c) for c in "abc\nhg"]]
    with torch.no_grad():
        torch.testing.assert_close(wrapped(input_ids=ids), model(ids)[0], rtol=0, atol=0)
    export_model(model, VOCAB, folder)  # replacing an export leaves one folder, no temporary siblings
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"no model\.safetensors"):
        load_lm(folder, config)
    with pytest.raises(ValueError, match="vocab"):
        export_model(model, VOCAB[:-1], tmp_path / "other")


def test_unknown_character_and_hypothesis(gen, tmp_path):
    with pytest.raises(ValueError, match="'z'"):
        CharTokenizer(VOCAB)("abz")
    with pytest.raises(ValueError, match="unknown hypothesis 'X1'"):
        ProbeConfig(hypotheses=("E1", "X1"))
    folder = export_model(_model(gen), VOCAB, tmp_path / "model")
    bad = tmp_path / "bad.txt"
    bad.write_text("abc" * 200 + "z" + "abc" * 200)
    for args, fragment in (
        (["--hypotheses", "E1,X1"], "unknown hypothesis 'X1'"),
        (["--detail-sequences", "0"], "detail_sequences must be an integer >= 1, got 0"),
        (["--text", str(bad), "--tokens", "640", "--seq-len", "16"], "'z'"),
    ):
        result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--out", str(tmp_path / "o"), *args])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and fragment in lines[0], result.output
        assert not (tmp_path / "o").exists()


def test_cli_probe_on_exported_model(gen, text, tmp_path):
    folder = export_model(_model(gen, carrier="gaussian_mixture"), VOCAB, tmp_path / "model")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--text", str(text), "--hypotheses",
                                      "E1,E2,E3,E5", "--tokens", "256", "--seq-len", "16", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "results.json").read_text())
    verdicts = {r["id"]: r["verdict"] for r in doc["records"]}
    assert list(verdicts) == ["E1", "E2", "E3", "E5"]
    assert verdicts["E5"] == "skipped" and all(verdicts[h] != "skipped" for h in ("E1", "E2", "E3"))
    assert "gaussian_mixture" in doc["records"][3]["notes"]
    assert doc["model"]["family"] == "expattn" and doc["model"]["layers"] == 3 and doc["tokens"] == 256
