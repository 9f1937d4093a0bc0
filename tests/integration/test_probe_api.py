"""``expattn.probe`` on a model in memory: the same numbers as ``expattn probe`` on the same folder and
text; ``input_ids`` fed as they are; results as a DataFrame and saved as the CLI saves them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import build_tiny, save_tiny

import expattn
from expattn.cli import app

ARGS = {"hypotheses": ("E1", "E2", "E5", "E6", "E8"), "tokens": 192, "seq_len": 32}  # the CLI's other defaults


def _numbers(records: list[dict]) -> list:
    """Ids, verdicts, metrics without timings and details without the model's name, per record."""
    return [(r["id"], r["verdict"], {k: v for k, v in r["metrics"].items() if not k.endswith("seconds")},
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
    assert sorted(p.name for p in saved.iterdir()) == sorted(["results.json", *plots])
    with pytest.raises(ValueError, match="already exists"):
        api.save(saved)


def test_input_ids_and_bad_arguments():
    model = build_tiny("llama")
    ids = torch.randint(1000, 2000, (4, 16), generator=torch.Generator().manual_seed(0))
    res = expattn.probe(model, input_ids=ids, hypotheses=("E5",), replicates=2, detail_sequences=2)
    assert res.outcome.tokens == 64 and res.outcome.sequences == 4
    assert res.verdicts == {"E5": "pass"}
    with pytest.raises(TypeError, match="input_ids must be an integer tensor"):
        expattn.probe(model, input_ids=ids.float())
    with pytest.raises(ValueError, match="tokenizer is needed"):
        expattn.probe(model, texts=["some text"])
    with pytest.raises(ValueError, match="dtype must be one of"):
        expattn.probe(model, input_ids=ids, dtype="float8")
    with pytest.raises(TypeError, match="model must be a HuggingFace transformers model"):
        expattn.probe(torch.nn.Linear(2, 2), input_ids=ids)
