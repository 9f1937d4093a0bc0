"""Messages that say what the user typed and what is expected: each case printed something misleading before
(a flag the user did not type, a guess at an unrelated option, a stale list of claims, an unnamed argument)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent.parent))
from tiny_models import build_tiny, minilm_tokenizer_dir

import expattn
from expattn.catalogue import ENTRIES
from expattn.cli import app


def _line(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    return lines[0]


def test_one_seed_points_to_seed(tmp_path):
    line = _line(["probe", "--model", "minilm", "--seeds", "0", "--out", str(tmp_path / "o")])
    assert "give --seed instead" in line and "seed's" not in line


def test_a_budget_in_exponent_notation_is_told_what_is_accepted(tmp_path):
    line = _line(["probe", "--model", "minilm", "--memory-budget", "1e30", "--out", str(tmp_path / "o")])
    assert "no exponent" in line and "positive number" not in line


def test_simulate_only_empty_names_only(tmp_path):
    line = _line(["simulate", "--only", "", "--out", str(tmp_path / "o")])
    assert "--only" in line and "--preset" not in line


def test_an_unknown_option_gets_no_unrelated_guess(tmp_path):
    line = _line(["simulate", "--jobs", "2", "--out", str(tmp_path / "o")])
    assert "--jobs" in line and "--atoms" not in line and "expattn simulate --help" in line


def test_simulate_help_names_no_stale_claim_range():
    """The help must not list claim IDs by hand: group B has more claims than B2-B7."""
    result = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert len([e for e in ENTRIES if e.id.startswith("B")]) > 6 and "B2-B7" not in result.output


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoTokenizer

    return build_tiny("llama"), AutoTokenizer.from_pretrained(str(minilm_tokenizer_dir()))


def test_texts_of_other_types_name_the_argument(tiny):
    with pytest.raises(TypeError, match="texts must be a string or a list of strings, got a list holding int"):
        expattn.probe(*tiny, texts=[1, 2], hypotheses="E1", tokens=64, seq_len=32)


def test_an_out_dir_that_cannot_be_made_is_refused_before_the_run(tiny, tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="out_dir '/proc/x' cannot be written"):
        expattn.probe(*tiny, hypotheses="E1", tokens=64, seq_len=32, out_dir="/proc/x")
    with pytest.raises(ValueError, match="cannot be a folder"):
        expattn.probe(*tiny, hypotheses="E1", tokens=64, seq_len=32, out_dir=tmp_path / "file" / "sub")
