"""report.html / report.md: escaping, embedded images, summary table, as-printed section (issue 9).

The HTML is read back with the standard library's ``html.parser`` (an independent parser), so
the assertions are about the page a browser builds, not about substrings of our own output.
"""

from __future__ import annotations

import base64
import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from expattn.report.document import CLAIM_TITLES, build_view
from expattn.report.html import render_html
from expattn.report.markdown import render_markdown
from expattn.results.record import Record, results_document

EVIL = "<script>alert(1)</script>"
# Independent statement of the severity order the summary must use (worst first).
SEVERITY = ["fail", "not_supported", "inconclusive", "skipped", "supported", "pass"]


class Page(HTMLParser):
    """Collects tags, attributes, text, and the summary table's cells."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.section: str | None = None
        self.rows: dict[str, list[list[str]]] = {}
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "section":
            self.section = attrs.get("id")
        elif tag == "tr":
            self.rows.setdefault(self.section or "", []).append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.rows[self.section or ""][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def parse(text: str) -> Page:
    page = Page()
    page.feed(text)
    page.close()
    return page


def draw_png(path: Path, gen: torch.Generator) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 1.5), dpi=40)
    ax.plot(torch.randn(20, generator=gen).cumsum(0).numpy())
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path.read_bytes()


def random_verdicts(gen: torch.Generator, n: int) -> list[str]:
    return [SEVERITY[i] for i in torch.randint(0, len(SEVERITY), (n,), generator=gen).tolist()]


@pytest.fixture
def report(tmp_path, gen):
    """A results document of random records (one with a plot, one with hostile strings)."""
    png = draw_png(tmp_path / "plots" / "b3.png", gen)
    ids = ["A3", "A8", "B3", "B3", "E1", "E1", "D2"]
    verdicts = random_verdicts(gen, len(ids))
    records = [
        Record(id=i, kind="identity", verdict=v, metrics={"max_error": float(torch.rand(1, generator=gen))})
        for i, v in zip(ids, verdicts, strict=True)
    ]
    records[1].as_printed = "fail"
    records[1].statement = "Hess G = Cov[u] | centred"
    records[1].metrics.update(as_printed_error=0.37, tolerance=1e-9)
    records[0].as_printed = "pass"
    records[2].plots = ["plots/b3.png"]
    records[4].details = {"stage": "probe", "model": f"evil{EVIL}"}
    records[4].notes = f"corpus line: {EVIL} & 'quotes' \"here\""
    records[5].details = {"stage": "probe", "name": EVIL, "extra": [EVIL]}
    records[5].metrics[f"m{EVIL}"] = 1.0
    records[6].plots = ["../outside.png", "plots/missing.png"]
    (tmp_path / "outside.png").write_bytes(png)
    doc = results_document(records, f"expattn report --models {EVIL}", seeds={"seed": 3})
    doc["stages"] = [
        {"name": "verify", "status": "ok", "seconds": 1.5, "records": 2, "reason": EVIL, "cpu_seconds": 2.25}
    ]
    return doc, tmp_path, png, records


def test_hostile_strings_are_inert_in_html(report):
    doc, root, _, _ = report
    text = render_html(doc, root)
    page = parse(text)
    assert "<script" not in text.lower()
    assert not [t for t, _ in page.tags if t in ("script", "iframe", "object", "embed", "link")]
    assert not [a for _, attrs in page.tags for a in attrs if a.startswith("on")]
    shown = "".join(page.text)
    # The model name, the notes, a metric name and the stage reason all show as text.
    assert shown.count(EVIL) >= 5
    assert "'quotes' \"here\"" in shown


def test_every_image_is_embedded_and_equals_the_plot_file(report):
    doc, root, png, _ = report
    page = parse(render_html(doc, root))
    images = [attrs for tag, attrs in page.tags if tag == "img"]
    assert len(images) == 1  # the outside and the missing plot are not embedded
    src = images[0]["src"]
    assert src.startswith("data:image/png;base64,")
    assert base64.b64decode(src.split(",", 1)[1]) == png
    shown = "".join(page.text)
    assert "plot file missing" in shown and "leaves the report folder" in shown
    # Nothing may reach the network: a CSP forbids scripts and remote loads.
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0]
    links = [a or "" for _, attrs in page.tags for k, a in attrs.items() if k in ("src", "href")]
    assert links and all(a.startswith(("data:", "#")) for a in links)


def test_summary_table_lists_every_claim_with_its_worst_verdict(report):
    """The worst verdict pools only records of no model; a model's record counts in the per-model matrix."""
    doc, root, _, records = report
    rows = parse(render_html(doc, root)).rows["summary"]
    assert rows[0] == ["ID", "claim", "worst verdict", "records"]
    table = {r[0]: r for r in rows[1:]}
    assert set(CLAIM_TITLES) <= set(table)
    for claim_id in CLAIM_TITLES:
        mine = [r.verdict for r in records if r.id == claim_id]
        checks = [r.verdict for r in records if r.id == claim_id and "model" not in r.details]
        expected = min(checks, key=SEVERITY.index) if checks else ("per model" if mine else "not run")
        assert table[claim_id][2] == expected, claim_id
        assert table[claim_id][3].count(":") == len(mine)


def test_as_printed_section_shows_only_failing_statements(report):
    doc, root, _, _ = report
    rows = parse(render_html(doc, root)).rows["as-printed"]
    assert len(rows) == 2  # header + A8; A3's as-printed statement passes
    assert rows[1][0] == "A8"  # a record without a stage label shows its ID only
    assert "E[u u^T]" in rows[1][1]  # the seed's wording
    assert rows[1][2] == "Hess G = Cov[u] | centred"  # the corrected statement, checked
    assert "0.37" in rows[1][3]


def test_one_card_per_record_in_its_group(report):
    doc, root, _, records = report
    page = parse(render_html(doc, root))
    cards = [a["id"] for t, a in page.tags if t == "article"]
    assert sorted(cards) == sorted(f"rec-{i}" for i in range(len(records)))
    sections = [a["id"] for t, a in page.tags if t == "section"]
    assert sections == ["models", "summary", "as-printed", "group-A", "group-B", "group-D", "group-E", "environment"]
    stage_rows = page.rows["environment"]
    assert ["verify", "ok", "1.5", "2.2", "2", EVIL] in stage_rows


def test_markdown_has_the_same_content_and_is_escaped(report):
    doc, _, _, records = report
    text = render_markdown(doc)
    assert "<script" not in text.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "![plots/b3.png](plots/b3.png)" in text.replace("\\", "")
    view = build_view(doc)
    section = text.split("\n## Summary\n")[1].split("\n## ")[0]
    summary = [line for line in section.splitlines() if re.match(r"\| \*\*[A-Z]\d+\*\* \|", line)]
    assert len(summary) == len(view.summary) == len(CLAIM_TITLES)
    # Every table line has as many unescaped cell separators as its header.
    for block in re.findall(r"((?:^\|.*\n)+)", text, flags=re.M):
        counts = {len(re.findall(r"(?<!\\)\|", line)) for line in block.splitlines()}
        assert len(counts) == 1, block
    assert text.count('<a id="rec-') == len(records)
    assert "A8" in text.split("## Statements that fail as printed")[1].split("##")[0]


def test_view_rejects_a_non_dict_document():
    with pytest.raises(TypeError, match="document must be a results dict"):
        build_view([dataclasses.asdict(Record(id="A1", kind="identity", verdict="pass"))])


def test_as_printed_evidence_and_fallback_text(gen):
    z = float(torch.rand(1, generator=gen)) * 100 + 5
    records = [
        Record(id="B5", kind="identity+dynamics", verdict="pass", as_printed="fail", metrics={"as_printed_cov_z": z}),
        Record(id="Z9", kind="identity", verdict="pass", as_printed="fail", notes="printed with a typo"),
    ]
    rows = parse(render_html(results_document(records, "test"), None)).rows["as-printed"]
    assert [r[0].split()[0] for r in rows[1:]] == ["B5", "Z9"]
    assert "E[eta eta^T]" in rows[1][1] and rows[1][3] == f"as_printed_cov_z = {z:.4g}"
    assert rows[2][1] == "printed with a typo"


@settings(max_examples=40, deadline=None)
@given(text=st.text(min_size=1, max_size=40))
def test_any_string_changes_no_markup_and_reads_back(text):
    def page(value: str) -> Page:
        record = Record(
            id="E1",
            kind="empirical",
            verdict="inconclusive",
            statement=value,
            notes=value,
            details={"stage": "probe", "model": value},
        )
        sweep = Record(
            id="E2",
            kind="empirical",
            verdict="supported",
            details={"stage": "train", "name": value, "probe_verdicts": {value: "supported"}},
        )
        return parse(render_html(results_document([record, sweep], value), None))

    fuzzed, plain = page(text), page("x")
    assert [t for t, _ in fuzzed.tags] == [t for t, _ in plain.tags]  # same elements, in the same order
    # Statement, notes, label, the model's and the sweep's columns, the run and its sweep read back as written.
    assert "".join(fuzzed.text).count(text) >= 6
