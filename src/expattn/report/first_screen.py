"""The report's first screen: the claim x (model or sweep) matrix with its legend, the summary figure below it at the
page's full width, and the trained-runs table that the matrix's sweep columns link to.

The first screen is a CSS grid of two columns (one below 1000 px of width), sized so that the matrix and its legend,
side by side, fit a 1366 x 768 window: the matrix's column is as wide as the matrix (up to two thirds of the window,
so three models and a sweep show every column); the other holds a link to the summary figure, the legend, what each
claim's number is and the caption. Compact rows; the matrix scrolls inside its box when it has many claims. Every
row title is in words with the claim's formula on hover, beside its headline's unit and direction; every cell is a
verdict badge linking to its record card (a sweep's cell to the trained-runs table) over the claim's headline
number. The legend says what each verdict's colour means and what the architectural mark means.
"""

from __future__ import annotations

from expattn.report.html_text import badge, esc
from expattn.report.matrix import MARK_LEGEND, RIVALS_LEGEND, RUNS_ANCHOR, Matrix

CSS = """
.first { display: grid; grid-template-columns: fit-content(66%) minmax(0, 1fr); gap: 18px; align-items: start; }
@media (max-width: 1000px) { .first { grid-template-columns: minmax(0, 1fr); } }
.first h2 { margin: 6px 0 4px; font-size: 18px; }
.first .box { max-height: 60vh; overflow: auto; }
.matrix { width: auto; font-size: 12.5px; line-height: 1.3; }
.matrix th, .matrix td { padding: 1px 5px; }
.matrix td.cell { white-space: nowrap; } .matrix td.title { min-width: 9em; max-width: 16em; }
.matrix td.reading { color: var(--muted); white-space: nowrap; font-size: 11.5px; }
.matrix .value { display: block; font-variant-numeric: tabular-nums; }
.matrix .badge { font-size: 11.5px; padding: 0 6px; margin: 0 1px; }
.first .caption, .headlines { font-size: 12px; line-height: 1.35; color: var(--muted); margin: 4px 0; }
.headlines { padding-left: 16px; } .first .figure-link { margin-top: 30px; }
.legend { list-style: none; padding: 0; margin: 4px 0; font-size: 12px; line-height: 1.5; }
.legend li { display: inline-block; margin-right: 10px; } .legend li.mark-legend { display: block; }
#fig-summary img { width: 100%; }
"""


def matrix_table(matrix: Matrix) -> str:
    """The matrix as a table: claim rows, model and sweep columns, headline descriptions as header tooltips."""
    head = "".join(f'<th title="{esc(c.description)}">{esc(c.name)}</th>' for c in matrix.columns)
    rows = []
    for row in matrix.rows:
        cells = []
        for found in row.cells:
            shown = " ".join(
                badge(c.verdict, c.anchor, title=c.note)
                + (f'<sup class="mark" title="{esc(c.note)}">{esc(c.mark)}</sup>' if c.mark else "")
                + (f' <span class="value">{esc(c.value)}</span>' if c.value else "")
                for c in found
            )
            cells.append(f'<td class="cell">{shown or "<span class=muted>-</span>"}</td>')
        formula = f' title="{esc(row.formula)}"' if row.formula else ""
        number = f' title="{esc(row.headline)}"' if row.headline else ""
        rows.append(
            f'<tr><td{formula}><b>{esc(row.claim_id)}</b></td><td class="title"{formula}>{esc(row.title)}</td>'
            f'<td class="reading"{number}>{esc(row.reading)}</td>{"".join(cells)}</tr>'
        )
    return (
        f'<table class="matrix"><tr><th>ID</th><th title="hover a claim for its formula">claim</th>'
        f'<th title="the headline number\'s unit and which way it points; hover for what it is">number</th>'
        f"{head}</tr>{''.join(rows)}</table>"
    )


def _caption(matrix: Matrix) -> str:
    text = (
        "Each cell: one model's own verdict (linked to its record) and the claim's headline number; verdicts "
        "are never pooled across models."
    )
    if matrix.runs:
        text += (
            " A sweep's column pools the trained runs of that one sweep: the worst verdict over its runs and "
            "n/m runs (n of its m runs gave that verdict), acceptable only because every run's own verdict "
            "and number is one click away in Trained runs."
        )
    return f'<p class="caption">{esc(text)}</p>'


# What each verdict colour means: evidence for or against a hypothesis in neutral hues; red only for a broken check.
VERDICT_MEANINGS = (
    ("pass", "an exact identity holds"),
    ("supported", "the data support the hypothesis"),
    ("not_supported", "the data reject it (a finding, not an error)"),
    ("inconclusive", "the rule cannot decide"),
    ("fail", "a check that must hold does not"),
    ("error", "the check could not run"),
)


def legend(matrix: Matrix) -> str:
    """The legend beside the matrix: what each verdict's colour means, and the mark where a cell carries it."""
    items = "".join(f"<li>{badge(v)} {esc(meaning)}</li>" for v, meaning in VERDICT_MEANINGS)
    mark = f'<li class="mark-legend">{esc(MARK_LEGEND)}</li>' if matrix.marked else ""
    rivals = f'<li class="mark-legend">{esc(RIVALS_LEGEND)}</li>' if matrix.rivalled else ""
    return f'<ul class="legend" id="legend" aria-label="legend">{items}{mark}{rivals}</ul>'


def _headlines(matrix: Matrix) -> str:
    items = "".join(
        f"<li><b>{esc(r.claim_id)}</b>: {esc(r.headline)}" + (f" ({esc(r.reading)})" if r.reading else "") + "</li>"
        for r in matrix.rows
        if r.headline
    )
    return f'<ul class="headlines" aria-label="headline numbers">{items}</ul>' if items else ""


def first_screen(matrix: Matrix | None, figure: str) -> str:
    """The first screen: the matrix beside its legend, the headline list, the caption and a link to ``figure``
    (the summary figure's HTML, ``""``: none), which follows at the page's full width, where its text is legible;
    ``""`` when there is neither."""
    if (matrix is None or not matrix.rows) and not figure:
        return ""
    left, right = "", ""
    if matrix is not None and matrix.rows:
        left = f'<div class="box">{matrix_table(matrix)}</div>'
        right = (
            f'{legend(matrix)}<p class="caption"><b>Headline numbers</b> (what each claim\'s cell shows):</p>'
            f"{_headlines(matrix)}{_caption(matrix)}"
        )
    if figure:
        right = (
            '<p class="caption figure-link"><a href="#fig-summary">The summary figure</a>, below the matrix: each '
            f"headline per layer against relative depth, one colour per model.</p>{right}"
        )
    return (
        f'<section id="models" class="first"><div><h2>Per model</h2>{left}</div><div>{right}</div></section>'
        + (f'<section id="summary-figure">{figure}</section>' if figure else "")
    )


def trained_runs(matrix: Matrix | None) -> str:
    """One row per trained run and claim: the run's own verdict (linked to its sweep's record) and number."""
    if matrix is None or not matrix.runs:
        return ""
    rows = "".join(
        f"<tr><td>{esc(r.sweep)}</td><td><b>{esc(r.claim_id)}</b></td><td>{esc(r.run)}</td>"
        f'<td>{badge(r.verdict, r.anchor)}</td><td class="num">{esc(r.value) or "-"}</td></tr>'
        for r in matrix.runs
    )
    head = "".join(f"<th>{h}</th>" for h in ("sweep", "claim", "run", "verdict", "headline number"))
    return (
        f'<section id="{RUNS_ANCHOR}"><h2>Trained runs</h2><p class="muted">Every run of every training sweep '
        "with its own verdict and headline number (the median of its per-layer values), by sweep, claim and "
        "run; the per-model matrix shows each sweep's worst verdict over these rows.</p>"
        f'<div class="scroll"><table class="runs"><tr>{head}</tr>{rows}</table></div></section>'
    )
