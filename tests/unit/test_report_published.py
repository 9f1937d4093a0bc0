"""The report's "Published results beside ours" section, from records' ``details["published"]``."""

from __future__ import annotations

from expattn.report.html import render_html
from expattn.report.markdown import render_markdown
from expattn.results.record import Record, results_document

ENTRY = {"source": "Dong et al. 2021 <script>", "measure": "rank collapse", "published": "doubly exponential",
         "ours": -15.45, "note": "causal & masked"}


def _document(*records: Record) -> dict:
    return results_document(list(records), "report")


def test_each_published_entry_is_a_row_beside_our_number_escaped():
    doc = _document(Record("E7", "empirical", "supported", details={"published": [ENTRY]}),
                    Record("E1", "empirical", "supported"))
    page = render_html(doc, None)
    section = page.split('<section id="published">')[1].split("</section>")[0]
    assert section.count("<tr>") == 2  # the header and one entry
    assert "Dong et al. 2021 &lt;script&gt;" in section and "<script>" not in page
    assert "-15.45" in section and "causal &amp; masked" in section and 'href="#' in section
    assert '<a href="#published">' in page
    text = render_markdown(doc)
    assert "## Published results beside ours" in text and "-15.45" in text


def test_no_section_without_published_entries_and_malformed_entries_are_skipped():
    doc = _document(Record("E1", "empirical", "supported", details={"published": "not a list"}),
                    Record("E3", "empirical", "supported", details={"published": [3, None]}))
    assert 'id="published"' not in render_html(doc, None)
    assert "Published results" not in render_markdown(doc)
