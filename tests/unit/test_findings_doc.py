"""``docs/FINDINGS.md`` is current: it is what ``scripts/findings.py`` renders from the committed ``docs/results.json``
(the README's main command, full mode), and that file holds a record of every claim in the catalogue."""

from __future__ import annotations

import json
from pathlib import Path

from expattn import catalogue
from expattn.report.markdown import findings_markdown

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_findings_are_rendered_from_the_committed_results():
    document = json.loads((DOCS / "results.json").read_text(encoding="utf-8"))
    assert (DOCS / "FINDINGS.md").read_text(encoding="utf-8") == findings_markdown(document), (
        "docs/FINDINGS.md is stale: run `python scripts/findings.py`")


def test_the_committed_results_are_a_full_report_of_every_claim():
    document = json.loads((DOCS / "results.json").read_text(encoding="utf-8"))
    assert document["command"].startswith("expattn report") and document["quick"] is False
    assert {r["id"] for r in document["records"]} == set(catalogue.ids())
