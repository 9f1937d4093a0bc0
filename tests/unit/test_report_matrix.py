"""The per-model matrix of the report: one verdict and headline number per claim and model or trained run,
never pooled; each cell links to its record's card; hostile model names stay text."""

from __future__ import annotations

import re

from test_report_html import EVIL, parse

from expattn.report.html import render_html
from expattn.report.markdown import render_markdown
from expattn.report.matrix import HEADLINES
from expattn.results.record import Record, results_document


def records() -> list[Record]:
    """minilm supports E1, smollm2 does not; a sweep pools two runs into one inconclusive record."""
    return [
        Record(id="A3", kind="identity", verdict="pass", details={"stage": "verify"}),
        Record(id="E1", kind="empirical", verdict="supported", metrics={"median_raw_ratio_excl": 1.2345678},
               details={"stage": "probe", "model": "minilm"}),
        Record(id="E1", kind="empirical", verdict="not_supported", metrics={"median_raw_ratio_excl": 0.75},
               details={"stage": "probe", "model": "smollm2"}),
        Record(id="E4", kind="empirical", verdict="skipped", notes="no weights",
               details={"stage": "probe", "model": EVIL}),
        Record(id="E1", kind="empirical", verdict="inconclusive",
               metrics={"a.layer0": 1.0, "a.layer1": 3.0, "a.layer2": 2.5, "normalized.a.layer0": 9.0,
                        "b.layer0": 0.5, "ab.layer0": 7.0, "b.val_loss": 2.0},
               details={"stage": "train", "name": "sweep", "probe_verdicts": {"a": "supported", "b": "not_supported"}}),
    ]


def test_html_matrix_has_one_cell_per_claim_and_model():
    page = parse(render_html(results_document(records(), "test"), None))
    rows = page.rows["models"]
    assert rows[0] == ["ID", "claim (headline number)", "minilm", "smollm2", EVIL, "sweep: a", "sweep: b"]
    table = {r[0]: r[2:] for r in rows[1:]}
    assert set(table) == {"E1", "E4"}  # verify records are not per model
    # Each model keeps its own verdict; the sweep's runs show their own verdicts and the median of
    # their own per-layer values (a: median(1, 3, 2.5) = 2.5; b: 0.5), not the pooled "inconclusive".
    assert table["E1"] == ["supported 1.235", "not_supported 0.75", "-", "supported 2.5", "not_supported 0.5"]
    assert table["E4"] == ["-", "-", "skipped", "-", "-"]
    links = [a["href"] for t, a in page.tags if t == "a" and a.get("class", "").startswith("badge")]
    cards = {a["id"] for t, a in page.tags if t == "article"}
    assert links and {h.lstrip("#") for h in links} - {"models"} <= cards
    assert HEADLINES["E1"][1] in "".join(page.text)


def test_summary_pools_only_records_of_no_model():
    summary = {r[0]: r for r in parse(render_html(results_document(records(), "test"), None)).rows["summary"][1:]}
    assert summary["A3"][2] == "pass"
    assert summary["E1"][2] == "per model" and summary["E4"][2] == "per model"
    assert summary["E2"][2] == "not run"


def test_markdown_matrix_agrees_and_links_cards():
    text = render_markdown(results_document(records(), "test"))
    section = text.split("\n## Per model\n")[1].split("\n## ")[0]
    e1 = next(line for line in section.splitlines() if line.startswith("| **E1**"))
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", e1)[1:-1]][2:]
    assert cells == ["[supported](#rec-1) 1.235", "[not\\_supported](#rec-2) 0.75", "-",
                     "[supported](#rec-4) 2.5", "[not\\_supported](#rec-4) 0.5"]
    assert "<script" not in text.lower()
