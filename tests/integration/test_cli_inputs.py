"""Bad inputs to the commands and the Python API: each is one ``error: ...`` line (or a ``ValueError`` /
``TypeError`` naming the argument) before any work, with nothing left behind."""

from __future__ import annotations

import os

import pytest
import torch
from cli_checks import one_line_error
from tiny_models import build_tiny
from typer.testing import CliRunner

import expattn
from expattn.cli import app


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["train", "--device", "meta"], ("device must be 'auto', 'cpu' or 'cuda[:i]'", "'meta'")),
        (["simulate", "--only", "custom", "--tokens", str(10**10)], ("custom run", "needs at least", "available")),
        (["probe", "--tokens", "256", "--seq-len", "16", "--detail-sequences", str(10**9)],
         ("--detail-sequences must be at most the number of sequences", "= 16", str(10**9))),
        (["probe", "--device-map", "auto", "--device", "cpu"], ("give device or device_map, not both",)),
        (["train", "--corpus", "/dev/zero"], ("'/dev/zero' is not a regular file",)),
    ],
    ids=["train-meta", "simulate-memory", "probe-detail", "probe-device-map", "train-dev-zero"],
)
def test_bad_inputs_are_one_line_and_leave_nothing(tmp_path, args, fragments):
    if "/dev/zero" in args and not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero here")
    one_line_error(CliRunner().invoke(app, [*args, "--out", str(tmp_path / "o")]), *fragments)
    assert list(tmp_path.iterdir()) == []


def test_detail_sequences_up_to_the_number_of_sequences_are_accepted(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("expattn.commands.probe.probe_to_dir", lambda configs, *a, **k: seen.extend(configs) or {})
    CliRunner().invoke(app, ["probe", "--tokens", "250", "--seq-len", "16", "--detail-sequences", "16",
                             "--out", str(tmp_path / "o")])
    CliRunner().invoke(app, ["probe", "--tokens", "64", "--seq-len", "16", "--out", str(tmp_path / "o")])
    assert [c.detail_sequences for c in seen] == [16, 32]  # the default is clamped by the run, as documented


def test_an_unreadable_text_file_is_aone_line_error(tmp_path, monkeypatch):
    text = tmp_path / "t.txt"
    text.write_text("some words " * 100)
    text.chmod(0)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p) == str(text) else real_access(p, mode, **k))

    def unreadable(path, *args, **kwargs):  # what a user other than root meets (root reads it anyway)
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("expattn.probes.models.corpus.read_text_limited", unreadable)
    result = CliRunner().invoke(app, ["probe", "--text", str(text), "--out", str(tmp_path / "o")])
    one_line_error(result, "t.txt", "is not readable UTF-8 text", "PermissionError")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]


def _tiny_and_ids():
    return build_tiny("llama"), torch.randint(1000, 2000, (4, 16), generator=torch.Generator().manual_seed(0))


def test_hypotheses_as_one_string():
    model, ids = _tiny_and_ids()
    one = expattn.probe(model, input_ids=ids, hypotheses="E5", replicates=2, detail_sequences=2)
    assert one.verdicts == {"E5": "pass"}
    two = expattn.probe(model, input_ids=ids, hypotheses="E1, E5", replicates=2, detail_sequences=2)
    assert set(two.verdicts) == {"E1", "E5"}
    with pytest.raises(TypeError, match=r"hypotheses must be an ID such as 'E1'.*got int"):
        expattn.probe(model, input_ids=ids, hypotheses=5)


def test_ids_outside_the_vocabulary_are_refused_before_the_forward_pass():
    model, ids = _tiny_and_ids()
    vocabulary = model.get_input_embeddings().num_embeddings
    for bad in (vocabulary, -1):
        wrong = ids.clone()
        wrong[2, 7] = bad
        low, high = int(wrong.min()), int(wrong.max())
        with pytest.raises(ValueError, match=rf"input_ids must lie in \[0, {vocabulary}\) .* got ids in "
                                             rf"\[{low}, {high}\]"):
            expattn.probe(model, input_ids=wrong, hypotheses=("E5",), replicates=2, detail_sequences=2)


def test_texts_that_are_not_strings_are_refused_by_name():
    model, _ = _tiny_and_ids()
    tokenizer = object()  # never reached: the texts are checked before a sequence is cut
    for texts, found in (([1, 2], "a list holding int"), (["a", None], "a list holding NoneType"), (5, "int")):
        with pytest.raises(TypeError, match=f"texts must be a string or a list of strings, got {found}$"):
            expattn.probe(model, tokenizer, texts=texts, hypotheses=("E5",))
    for empty in ("", [" ", "\n"]):
        with pytest.raises(ValueError, match="texts are empty"):
            expattn.probe(model, tokenizer, texts=empty, hypotheses=("E5",))
