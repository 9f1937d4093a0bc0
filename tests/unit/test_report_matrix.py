"""The per-model matrix of the report: one verdict and headline number per claim and model, never pooled
across models; a sweep's column shows the worst verdict over its trained runs (``n/m runs``) and links to the
trained-runs table, which keeps every run's own verdict and number; hostile model names stay text."""

from __future__ import annotations

import html
import re

from test_report_html import EVIL, SEVERITY, parse, random_verdicts

from expattn.catalogue import headlines
from expattn.catalogue.entry import HEADLINE_READINGS
from expattn.report.html import render_html
from expattn.report.markdown import render_markdown
from expattn.report.matrix import sweep_cell
from expattn.results.record import Record, results_document

HEADLINES = headlines()  # the catalogue's headline of each probed claim


def records() -> list[Record]:
    """minilm supports E1, smollm2 does not; a sweep of three runs (a supports E1, b and c do not; a and b
    support E3) pools them into majority records."""
    return [
        Record(id="A3", kind="identity", verdict="pass", details={"stage": "verify"}),
        Record(
            id="E1",
            kind="empirical",
            verdict="supported",
            metrics={"median_raw_ratio_excl": 1.2345678},
            details={"stage": "probe", "model": "minilm"},
        ),
        Record(
            id="E1",
            kind="empirical",
            verdict="not_supported",
            metrics={"median_raw_ratio_excl": 0.75},
            details={"stage": "probe", "model": "smollm2"},
        ),
        Record(
            id="E4", kind="empirical", verdict="skipped", notes="no weights", details={"stage": "probe", "model": EVIL}
        ),
        Record(
            id="E3",
            kind="empirical",
            verdict="supported",
            metrics={"a.depth0": 4.0, "a.depth1": 6.0, "b.depth0": 1.0},
            details={"stage": "train", "name": "sweep", "probe_verdicts": {"a": "supported", "b": "supported"}},
        ),
        Record(
            id="E1",
            kind="empirical",
            verdict="not_supported",
            metrics={
                "a.layer0": 1.0,
                "a.layer1": 3.0,
                "a.layer2": 2.5,
                "normalized.a.layer0": 9.0,
                "b.layer0": 0.5,
                "ab.layer0": 7.0,
                "b.val_loss": 2.0,
                "c.layer0": 0.25,
                "c.layer1": 1.25,
            },
            details={
                "stage": "train",
                "name": "sweep",
                "probe_verdicts": {"a": "supported", "b": "not_supported", "c": "not_supported"},
            },
        ),
    ]


def test_html_matrix_has_one_cell_per_claim_and_model_and_one_per_sweep():
    page = parse(render_html(results_document(records(), "test"), None))
    rows = page.rows["models"]
    assert rows[0] == ["ID", "claim", "number", "minilm", "smollm2", EVIL, "sweep"]
    # Each row says its headline's unit and which way it points.
    assert {r[0]: r[2] for r in rows[1:]} == {
        "E1": "ratio; > 1 = widens", "E3": "|kurtosis|; 0 = Gaussian", "E4": "cosine; 1 = aligned"}
    table = {r[0]: r[3:] for r in rows[1:]}
    assert set(table) == {"E1", "E3", "E4"}  # verify records are not per model
    # Each model keeps its own verdict and number. The sweep's cell is the worst of its runs' verdicts and how
    # many of its runs gave it (E1: b and c of a, b, c), not the record's pooled majority.
    assert table["E1"] == ["supported 1.235", "not_supported 0.75", "-", "not_supported 2/3 runs"]
    assert table["E3"] == ["-", "-", "-", "supported 2/2 runs"]
    assert table["E4"] == ["-", "-", "skipped", "-"]
    links = [a["href"] for t, a in page.tags if t == "a" and a.get("class", "").startswith("badge")]
    cards = {a["id"] for t, a in page.tags if t == "article"}
    assert links and {h.lstrip("#") for h in links} - {"models", "trained-runs"} <= cards
    sweep_links = [a for t, a in page.tags if t == "a" and a.get("href") == "#trained-runs"]
    assert len(sweep_links) == 1 + 2  # the nav, and E1's and E3's sweep cells with a tooltip each
    assert ["3 trained runs; 2 of them" in a.get("title", "") for a in sweep_links] == [False, True, False]
    assert "2 trained runs; 2 of them" in sweep_links[2]["title"]


def test_headers_explain_the_headline_numbers():
    page = parse(render_html(results_document(records(), "test"), None))
    tips = {a.get("title") for t, a in page.tags if t in ("th", "td")}
    assert {HEADLINES["E1"][1], HEADLINES["E3"][1], HEADLINES["E4"][1]} <= tips
    headers = [a for t, a in page.tags if t == "th" and "title" in a]
    assert any(EVIL in a["title"] for a in headers)  # a model column says what its cells are, name as text
    assert any("n/m runs" in a["title"] for a in headers)  # the sweep column says what it pools
    # The "Headline numbers" list under the matrix: one item per claim row.
    items = re.findall(r"<li><b>(E\d)</b>: ([^<]*)</li>", render_html(results_document(records(), "test"), None))
    assert [(c, html.unescape(t)) for c, t in items] == [
        (c, f"{HEADLINES[c][1]} ({HEADLINE_READINGS[c]})") for c in ("E1", "E3", "E4")
    ]


def test_trained_runs_table_keeps_every_runs_verdict_and_number():
    page = parse(render_html(results_document(records(), "test"), None))
    rows = page.rows["trained-runs"]
    assert rows[0] == ["sweep", "claim", "run", "verdict", "headline number"]
    # By claim then run; numbers are the medians of each run's own per-layer values
    # (E1 a: median(1, 3, 2.5) = 2.5, c: median(0.25, 1.25) = 0.75; E3 a: median(4, 6) = 5).
    assert rows[1:] == [
        ["sweep", "E1", "a", "supported", "2.5"],
        ["sweep", "E1", "b", "not_supported", "0.5"],
        ["sweep", "E1", "c", "not_supported", "0.75"],
        ["sweep", "E3", "a", "supported", "5"],
        ["sweep", "E3", "b", "supported", "1"],
    ]
    section = parse(render_html(results_document(records(), "test"), None).split('id="trained-runs"')[1])
    links = [a["href"] for t, a in section.tags if t == "a"]
    assert links[:5] == ["#rec-5"] * 3 + ["#rec-4"] * 2  # each run links to its sweep's record


def test_sweep_cell_is_the_worst_verdict_and_its_count(gen):
    for m in (1, 2, 5, 9):
        verdicts = random_verdicts(gen, m)
        low = min(verdicts, key=SEVERITY.index)
        cell = sweep_cell(verdicts)
        assert (cell.verdict, cell.value) == (low, f"{verdicts.count(low)}/{m} runs")
    assert sweep_cell(["pass", "supported", "pass"]).value == "1/3 runs"


def test_no_sweep_no_trained_runs_section():
    page = parse(render_html(results_document(records()[:4], "test"), None))
    assert "trained-runs" not in page.rows and not any(a.get("href") == "#trained-runs" for _, a in page.tags)
    assert "Trained runs" not in render_markdown(results_document(records()[:4], "test"))


def test_markdown_matrix_and_trained_runs_agree_and_link():
    text = render_markdown(results_document(records(), "test"))
    section = text.split("\n## Per model\n")[1].split("\n## ")[0]

    def cells(line: str) -> list[str]:
        return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]

    e1 = next(line for line in section.splitlines() if line.startswith("| **E1**"))
    assert cells(e1)[2:] == [
        "[supported](#rec-1) 1.235",
        "[not\\_supported](#rec-2) 0.75",
        "-",
        "[not\\_supported](#trained-runs) 2/3 runs",
    ]
    assert f"- **E1**: {HEADLINES['E1'][1]}" in section.replace("\\", "")
    runs = text.split("\n## Trained runs\n")[1].split("\n## ")[0]
    lines = [cells(line) for line in runs.splitlines() if line.startswith("| sweep | **")]
    assert [c[1:] for c in lines] == [
        ["**E1**", "a", "[supported](#rec-5)", "2.5"],
        ["**E1**", "b", "[not\\_supported](#rec-5)", "0.5"],
        ["**E1**", "c", "[not\\_supported](#rec-5)", "0.75"],
        ["**E3**", "a", "[supported](#rec-4)", "5"],
        ["**E3**", "b", "[supported](#rec-4)", "1"],
    ]
    assert '<a id="trained-runs"></a>' in text and "<script" not in text.lower()


def test_the_rivals_of_e4_and_e9_are_in_the_legend_where_either_has_a_row():
    from expattn.report.matrix import RIVALS_LEGEND

    with_e4 = results_document(records(), "test")  # E4 has a row (skipped on one model)
    without = results_document([r for r in records() if r.id != "E4"], "test")
    legend = html.escape(RIVALS_LEGEND)
    assert legend in render_html(with_e4, None) and legend not in render_html(without, None)
    assert RIVALS_LEGEND in render_markdown(with_e4) and RIVALS_LEGEND not in render_markdown(without)
    assert "top 1, 5 and 20 directions" in RIVALS_LEGEND and "Sigma^2, Sigma^(1/2)" in RIVALS_LEGEND
