"""``expattn.probe`` on a model in memory: the same numbers as ``expattn probe`` on the same folder and
text; ``input_ids`` fed as they are (a planted massive activation named by its token's text); results as a
DataFrame and saved as the CLI saves them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import build_tiny, minilm_tokenizer_dir, save_tiny

import expattn
from expattn.cli import app

ARGS = {"hypotheses": ("E1", "E2", "E5", "E6", "E8"), "tokens": 192, "seq_len": 32}  # the CLI's other defaults


def _numbers(records: list[dict]) -> list:
    """Ids, verdicts, metrics and details without the model's name, per record."""
    return [(r["id"], r["verdict"], r["metrics"],
             {k: v for k, v in r["details"].items() if k != "model"}) for r in records]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", ["qwen2", "bert"])
def test_api_equals_cli(tmp_path, model_type):
    from transformers import AutoModel, AutoTokenizer

    folder = save_tiny(model_type, tmp_path / model_type)
    text = tmp_path / "text.txt"
    text.write_text("Now is the winter of our discontent made glorious summer by this sun of York.\n" * 40)
    out = tmp_path / "cli"
    result = CliRunner().invoke(app, ["probe", "--model", str(folder), "--text", str(text), "--out", str(out),
                                      "--only", ",".join(ARGS["hypotheses"]), "--tokens", "192", "--seq-len", "32"])
    assert result.exit_code == 0, result.output
    cli = json.loads((out / "results.json").read_text())["records"]
    model, tokenizer = AutoModel.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    api = expattn.probe(model, tokenizer, texts=[text.read_text()], **ARGS)
    mine = [json.loads(json.dumps(r.__dict__, default=str)) for r in api.records]
    assert _numbers(mine) == _numbers(cli)
    assert set(api.verdicts) == set(ARGS["hypotheses"])
    frame = api.to_frame()
    e5 = frame[(frame.id == "E5") & (frame.metric == "reconstruction")]
    assert len(e5) == 2 * 4 and e5["layer"].notna().all() and e5["head"].notna().all()  # every layer and head
    assert float(e5.value.max()) <= 32 * torch.finfo(torch.float32).eps
    saved = api.save(tmp_path / "saved")
    doc = json.loads((saved / "results.json").read_text())
    assert _numbers(doc["records"]) == _numbers(mine)
    plots = [p for r in api.records for p in r.plots]
    assert sorted(p.name for p in saved.iterdir()) == sorted(["results.json", "timings.json", *plots])
    with pytest.raises(ValueError, match="already exists"):
        api.save(saved)


def test_input_ids_and_bad_arguments():
    model = build_tiny("llama")
    ids = torch.randint(1000, 2000, (4, 16), generator=torch.Generator().manual_seed(0))
    heard = []
    res = expattn.probe(model, input_ids=ids, hypotheses=("E5",), replicates=2, detail_sequences=2,
                        batch_size=2, progress=lambda done, total: heard.append((done, total)))
    assert res.outcome.tokens == 64 and res.outcome.sequences == 4
    assert res.verdicts == {"E5": "pass"}
    assert heard == [(0, 64), (32, 64), (64, 64)]  # a (done, total) callback hears the tokens fed
    with pytest.raises(TypeError, match="input_ids must be an integer tensor"):
        expattn.probe(model, input_ids=ids.float())
    with pytest.raises(ValueError, match="tokenizer is needed"):
        expattn.probe(model, texts=["some text"])
    with pytest.raises(ValueError, match="dtype must be one of"):
        expattn.probe(model, input_ids=ids, dtype="float8")
    with pytest.raises(TypeError, match="model must be a HuggingFace transformers model"):
        expattn.probe(torch.nn.Linear(2, 2), input_ids=ids)


def test_massive_activation_named_by_its_token_text():
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_tokenizer_dir())
    comma = tokenizer.convert_tokens_to_ids(",")
    model = build_tiny("llama")
    with torch.no_grad():  # the embedding (depth 0) of "," gets one entry of 5000: massive by the rule at depth 0
        model.get_input_embeddings().weight[comma, 3] = 5000.0
    ids = torch.randint(1000, 2000, (4, 16), generator=torch.Generator().manual_seed(0))
    ids[[1, 3], 5] = comma  # position 5 of sequences 1 and 3
    res = expattn.probe(model, tokenizer, input_ids=ids, hypotheses=("E3",), replicates=2, detail_sequences=2)
    massive = res.records[0].details["massive_activations"]
    assert massive["onset_layer"] == 0
    entry = massive["tokens"][0]  # its count: 2 sequences x the depths where the residual stream keeps the entry
    assert (entry["position"], entry["token"], entry["sequences"]) == (5, ",", [1, 3])
    assert "position(s) 5 (',')" in res.records[0].details["published"][0]["ours"]
    without = expattn.probe(model, input_ids=ids, hypotheses=("E3",), replicates=2, detail_sequences=2)
    assert without.records[0].details["massive_activations"]["tokens"][0]["token"] is None
