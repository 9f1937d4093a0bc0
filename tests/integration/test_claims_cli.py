"""``expattn claims`` through typer's CliRunner: the table, one claim in full, Markdown, errors."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from expattn.catalogue import ids as catalogue_ids
from expattn.cli import app

ROOT = Path(__file__).resolve().parents[2]


def flat(text: str) -> str:
    """Whitespace collapsed, so that text wrapped inside a table cell compares as one line."""
    return " ".join(text.split())


def test_one_claim_prints_every_field():
    result = CliRunner().invoke(app, ["claims", "E4"])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    for text in (
        "sym(W_q^T W_k) of each head aligns with Sigma^-1 of its input, on the range of Sigma",
        "seed 000 §3.2 (A11)",
        "src/expattn/probes/hypotheses/e4_alignment.py",
        "tests/unit/test_probe_e4.py",
        "expattn probe --model minilm --only E4 --out probe-e4",
    ):
        assert text in out, text


def test_a_misprinted_claim_shows_what_the_seed_prints_and_how_it_is_wrong():
    result = CliRunner().invoke(app, ["claims", "a9"])
    assert result.exit_code == 0, result.output
    out = flat(result.output)
    assert "KL(p(.|a) || p(.|b)): the arguments of the KL divergence are swapped" in out
    assert "(convention:" in out and "expattn verify --only A9" in out


def test_brackets_in_catalogue_text_print_literally():
    result = CliRunner().invoke(app, ["claims", "A8"])  # rich would read "[u u^T]" as a style tag
    assert result.exit_code == 0, result.output
    assert "Hess G(eta) = E[u u^T], the uncentred second moment" in flat(result.output)


def test_without_id_every_claim_is_a_row():
    result = CliRunner().invoke(app, ["claims"])
    assert result.exit_code == 0, result.output
    rows = [line.split("│")[1].strip() for line in result.output.splitlines() if line.startswith("│")]
    ids = [r for r in rows if r]
    assert ids == list(catalogue_ids())
    assert "simulate b5-theorem1" in flat(result.output)


def test_markdown_is_docs_claims_md():
    result = CliRunner().invoke(app, ["claims", "--markdown"])
    assert result.exit_code == 0, result.output
    assert result.output == (ROOT / "docs" / "CLAIMS.md").read_text(encoding="utf-8")


def test_unknown_id_exits_2_with_one_line():
    result = CliRunner().invoke(app, ["claims", "Z99"])
    assert result.exit_code == 2
    message = result.output.strip()
    assert "Z99" in message and "A1-A11" in message
    assert len(message.splitlines()) == 1 and "Traceback" not in message
