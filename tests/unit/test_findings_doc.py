"""``docs/FINDINGS.md`` is current: it is what ``scripts/findings.py`` renders from the committed ``docs/results.json``
(the README's main command, full mode), and that file holds a record of every claim in the catalogue."""

from __future__ import annotations

import json
from pathlib import Path

from expattn import catalogue
from expattn.probes.hypotheses import hypotheses
from expattn.report.markdown import findings_markdown, read_spreads, spread_section
from expattn.results.seed_spread import spread_name

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_findings_are_rendered_from_the_committed_results():
    document = json.loads((DOCS / "results.json").read_text(encoding="utf-8"))
    spreads = read_spreads(DOCS / "seeds")
    assert (DOCS / "FINDINGS.md").read_text(encoding="utf-8") == findings_markdown(document, spreads), (
        "docs/FINDINGS.md is stale: run `python scripts/findings.py`")


def test_the_committed_results_are_a_full_report_of_every_claim():
    document = json.loads((DOCS / "results.json").read_text(encoding="utf-8"))
    assert document["command"].startswith("expattn report") and document["quick"] is False
    assert {r["id"] for r in document["records"]} == set(catalogue.ids())
    # a results.json as the report writes it, without its timings.json: what a seed fixes, no wall clock (the
    # findings above then render the stages' seconds as "-")
    assert "timings" not in document and all("seconds" not in s for s in document["stages"])


def test_the_spread_over_seeds_is_each_models_probe_at_three_seeds():
    """Each model's seeds.json holds seeds 0-2 of hypotheses the probe has; one added after a model's seeds were
    run is not there yet, and the findings' table says *pending* in its cell (the test below)."""
    spreads = read_spreads(DOCS / "seeds")
    assert [spread_name(d) for d in spreads] == ["gemma3", "minilm", "qwen2.5-0.5b (bfloat16)", "qwen2.5-0.5b",
                                                 "qwen2.5-1.5b (bfloat16)", "qwen2.5-1.5b", "smollm2"]
    for doc in spreads:
        assert doc["seeds"] == [0, 1, 2] and {h["id"] for h in doc["hypotheses"]} <= set(hypotheses())


def test_a_hypothesis_newer_than_a_models_seeds_is_pending():
    entry = {"id": "E1", "description": "ratio", "seeds": [0, 1], "values": [1.0, 2.0], "median": 1.5, "min": 1.0,
             "max": 2.0, "verdicts": ["pass", "pass"], "verdicts_agree": True}
    newer = {**entry, "id": "E10", "description": "growth"}
    lines = spread_section([{"model": "old", "seeds": [0, 1], "hypotheses": [entry]},
                            {"model": "new", "seeds": [0, 1], "hypotheses": [entry, newer]}])
    assert "| E10 | growth | *pending* | 1.5 [1, 2] pass |" in lines
    assert "| E1 | ratio | 1.5 [1, 2] pass | 1.5 [1, 2] pass |" in lines


def test_a_headline_whose_verdicts_differ_is_marked():
    entry = {"id": "E1", "description": "ratio", "seeds": [0, 1], "values": [1.0, 2.0], "median": 1.5, "min": 1.0,
             "max": 2.0, "verdicts": ["inconclusive", "supported"], "verdicts_agree": False}
    same = {**entry, "id": "E2", "verdicts": ["pass", "pass"], "verdicts_agree": True}
    lines = spread_section([{"model": "m", "seeds": [0, 1], "hypotheses": [entry, same]}])
    assert "| E1 | ratio | 1.5 [1, 2] **inconclusive, supported** |" in lines
    assert "| E2 | ratio | 1.5 [1, 2] pass |" in lines
