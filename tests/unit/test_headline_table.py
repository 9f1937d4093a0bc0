"""The probe's final table: each hypothesis's headline number (the report matrix's), its verdict, and why a
skipped one was skipped; user strings stay text."""

from __future__ import annotations

from rich.console import Console

from expattn.commands.tables import headline_table
from expattn.report.matrix import HEADLINES
from expattn.results.record import Record


def rendered(records: list[Record]) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(headline_table(records, "probe"))
    return console.export_text()


def test_headline_numbers_and_skips():
    records = [
        Record(id="E1", kind="empirical", verdict="supported", metrics={"median_raw_ratio_excl": 1.23456789}),
        Record(id="E5", kind="identity", verdict="pass", metrics={"max_error": 2.0221e-06}),
        Record(id="E4", kind="empirical", verdict="skipped", notes="[bold]no weights[/] <b>"),
    ]
    lines = {line.split("│")[1].strip(): line for line in rendered(records).splitlines() if line.count("│") > 3}
    assert "1.235" in lines["E1"] and HEADLINES["E1"][1][:20] in lines["E1"]
    assert "2.022e-06" in lines["E5"]
    assert "[bold]no weights[/] <b>" in lines["E4"] and " - " in lines["E4"]


def test_no_skip_column_without_skips():
    text = rendered([Record(id="E8", kind="empirical", verdict="supported", metrics={"median_pairwise_cos": -0.02})])
    assert "why skipped" not in text and "-0.02" in text
