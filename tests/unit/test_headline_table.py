"""The probe's final table: each hypothesis's headline number (the report matrix's), its verdict, and why a
skipped one was skipped; user strings stay text."""

from __future__ import annotations

from rich.console import Console

from expattn.catalogue import headlines
from expattn.commands.tables import headline_table
from expattn.probes.hypotheses.e7_collapse import collapse_verdict
from expattn.results.record import Record

HEADLINES = headlines()  # the catalogue's headline of each probed claim


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


def test_e7_headline_is_the_decades_lost_positive_when_supported():
    """E7's number says what its verdict reads: the decades the pure-attention path's rank-one residual loses,
    -log10(res_L / res_0), positive and above 2 for a collapse (supported), below 1 when the rank is kept."""
    assert collapse_verdict((14.9, 16.0)) == "supported"
    assert collapse_verdict((0.1, 0.4)) == "not_supported" and collapse_verdict((1.5, 2.5)) == "inconclusive"
    assert collapse_verdict((-0.3, 0.2)) == "not_supported"  # a residual that grows keeps its rank
    record = Record(id="E7", kind="empirical", verdict="supported",
                    metrics={"decades_lost_no_skip": 15.45, "decades_lost_no_skip_low": 14.9})
    line = next(line for line in rendered([record]).splitlines() if line.count("│") > 3 and "E7" in line)
    assert "decades lost" in line and "15.45" in line and "-15.45" not in line
    assert "drop" not in HEADLINES["E7"][1]
