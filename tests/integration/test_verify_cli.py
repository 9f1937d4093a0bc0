"""``expattn verify`` end to end through typer's CliRunner: groups A and C, JSON, selection, errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from expattn.catalogue import ENTRIES
from expattn.cli import app

A_AND_C = [f"A{i}" for i in range(1, 12)] + ["C1", "C2"]
MISPRINTED = {e.id for e in ENTRIES if e.as_printed is not None and e.id in A_AND_C}  # what the catalogue marks


@pytest.fixture(scope="module")
def verify_document(tmp_path_factory):
    path = tmp_path_factory.mktemp("verify") / "verify.json"
    result = CliRunner().invoke(app, ["verify", "--only", ",".join(A_AND_C), "--json", str(path)])
    assert result.exit_code == 0, result.output
    return json.loads(path.read_text())


@pytest.mark.slow
def test_every_a_and_c_claim_passes(verify_document):
    records = {r["id"]: r for r in verify_document["records"]}
    assert sorted(records) == sorted(A_AND_C)
    assert {r["id"] for r in records.values() if r["verdict"] != "pass"} == set()
    for r in records.values():
        assert r["metrics"]["max_error"] <= r["metrics"]["tolerance"]


@pytest.mark.slow
def test_as_printed_fails_exactly_for_the_marked_misprints(verify_document):
    failing = {r["id"] for r in verify_document["records"] if r["as_printed"] == "fail"}
    assert failing == MISPRINTED
    assert verify_document["seeds"] == {"seed": 0} and "torch" in verify_document["versions"]


def test_only_selects_claims(tmp_path):
    path = tmp_path / "out.json"
    result = CliRunner().invoke(app, ["verify", "--only", "A3,A9", "--json", str(path)])
    assert result.exit_code == 0, result.output
    assert [r["id"] for r in json.loads(path.read_text())["records"]] == ["A3", "A9"]


def test_unknown_id_exits_2_with_one_line(tmp_path):
    path = tmp_path / "never.json"
    result = CliRunner().invoke(app, ["verify", "--only", "A3,Z99", "--json", str(path)])
    assert result.exit_code == 2
    message = result.output.strip()
    assert "Z99" in message and len(message.splitlines()) == 1 and "Traceback" not in message
    assert not path.exists()
