"""The README's screenshot (docs/report-screenshot.png) shows the current report of docs/results.json: the count
pills it recorded when it was taken are those the report renders now, and their numbers are the verdicts of the
committed results file. Regenerate it with
``.venv/bin/python scripts/screenshot_report.py docs/results.json docs/report-screenshot.png 1366x768``."""

from __future__ import annotations

import collections
import html
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from expattn.report.html import render_html

pytest.importorskip("PIL")
ROOT = Path(__file__).resolve().parents[2]
RESULTS, SCREENSHOT = ROOT / "docs" / "results.json", ROOT / "docs" / "report-screenshot.png"
_spec = importlib.util.spec_from_file_location("screenshot_report", ROOT / "scripts" / "screenshot_report.py")
shot = sys.modules.setdefault("screenshot_report", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(shot)


def rendered_pills(document: dict) -> str:
    """The text of the report's count pills, as a browser shows it (tags dropped, whitespace collapsed)."""
    found = re.search(r'<p class="pills">(.*?)</p>', render_html(document, None), re.S)
    assert found is not None, "the report has no count pills"
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", found[1])).split())


def pill_totals(pills: str) -> collections.Counter:
    """Verdict -> records, summed over the kinds of a pills text ("identities: 42 pass simulations: 13 pass ...")."""
    totals: collections.Counter = collections.Counter()
    for n, verdict in re.findall(r"(\d+) ([a-z_]+)", pills):
        totals[verdict] += int(n)
    return totals


def test_screenshot_shows_the_current_reports_counts():
    document = json.loads(RESULTS.read_text(encoding="utf-8"))
    shown = shot.shown_pills(SCREENSHOT)
    assert shown is not None, "the screenshot records no pills: regenerate it with scripts/screenshot_report.py"
    assert shown == rendered_pills(document), "the screenshot is stale: regenerate it with scripts/screenshot_report.py"
    # Independently of how the report groups them, the numbers are the committed records' verdicts.
    assert pill_totals(shown) == collections.Counter(r["verdict"] for r in document["records"])


def test_a_stale_screenshot_is_told_apart(tmp_path):
    from PIL import Image

    document = json.loads(RESULTS.read_text(encoding="utf-8"))
    stale = tmp_path / "stale.png"
    Image.new("RGB", (4, 4)).save(stale)
    shot._tag(stale, "identities: 53 pass")  # an older report's single count
    assert shot.shown_pills(stale) != rendered_pills(document)
    assert pill_totals("identities: 53 pass") != collections.Counter(r["verdict"] for r in document["records"])
    Image.new("RGB", (4, 4)).save(stale)
    assert shot.shown_pills(stale) is None  # a screenshot taken without the script records nothing
