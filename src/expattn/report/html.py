"""``report.html``: one self-contained page (inline CSS, images as data URIs, no scripts, no network).

Every string that comes from a record, a model, a corpus or the environment passes through
``html.escape``; a Content-Security-Policy forbids scripts and any fetch, so even a string that
escaped escaping could neither run nor load anything.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from expattn.report.cards import Card, format_value
from expattn.report.document import (
    CLAIM_TITLES,
    PUBLISHED_FIELDS,
    ReportView,
    as_printed_evidence,
    build_view,
    card_fields,
    control_rows,
    cpu,
    details_text,
    published_rows,
    source_label,
    wall,
)
from expattn.report.figures import Figure, Figures, report_figures
from expattn.report.first_screen import CSS as FIRST_SCREEN_CSS
from expattn.report.first_screen import first_screen, trained_runs
from expattn.report.html_text import badge, esc
from expattn.report.matrix import PER_MODEL, RUNS_ANCHOR, check_verdict
from expattn.report.pills import kind_counts, lead_sentence

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

CSS = """
:root { --fg:#1d2430; --muted:#5b6675; --line:#d8dde5; --bg:#f6f7f9; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color:var(--fg); background:var(--bg); }
main { max-width: 1440px; margin: 0 auto; padding: 12px 20px 24px; }
h1 { margin: 0 0 2px; font-size: 24px; } h2 { margin-top: 36px; border-bottom: 2px solid var(--line); }
h3 { margin: 0; font-size: 17px; }
header p { margin: 2px 0; } nav { font-size: 14px; } nav a { margin-right: 12px; color: #2457a6; }
table { border-collapse: collapse; width: 100%; background: var(--card); }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.controls td.num { white-space: normal; overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 1px 8px; margin: 1px 2px; border-radius: 10px; font-size: 13px;
         color: #fff; background: #7a8594; text-decoration: none; white-space: nowrap; }
.pass, .ok { background: #2e7d32; } .fail { background: #c62828; }
.error { background: #b00020; outline: 2px solid #5c0011; }
.supported { background: #1f5f8b; } .not_supported { background: #5f5a8c; } .inconclusive { background: #7d6b3a; }
.skipped, .not-run { background: #7a8594; }
.pills { margin: 2px 0; font-size: 13px; } .pills .kind { margin-right: 10px; white-space: nowrap; }
.lead { font-size: 14px; max-width: 1100px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 14px 16px;
        margin: 14px 0; }
.card > header { display: flex; justify-content: space-between; align-items: center; gap: 12px; }
.label { color: var(--muted); font-weight: normal; font-size: 14px; }
dl { display: grid; grid-template-columns: 110px 1fr; gap: 2px 12px; margin: 10px 0; }
dt { color: var(--muted); } dd { margin: 0; overflow-wrap: anywhere; }
.metrics { width: auto; min-width: 50%; margin: 8px 0; font-size: 14px; }
.notes { white-space: pre-wrap; color: var(--muted); overflow-wrap: anywhere; }
figure { margin: 10px 0; } figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption, .missing { color: var(--muted); font-size: 13px; }
pre { background: #f0f2f5; padding: 8px; overflow-x: auto; font-size: 12px; max-height: 400px; }
.muted { color: var(--muted); }
.per-model { background: #2457a6; } .scroll { overflow-x: auto; }
"""

IMAGE_TYPES = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF8": "image/gif"}


def image_data_uri(plot_root: Path | None, relative: str) -> tuple[str | None, str]:
    """``data:<mime>;base64,...`` of a plot file inside ``plot_root``, or ``(None, reason)``.

    Paths outside ``plot_root``, missing files and files that are not PNG/JPEG/GIF give a reason
    instead of a broken image.
    """
    if plot_root is None:
        return None, "no plot folder given"
    root = plot_root.resolve()
    path = (root / relative).resolve()
    if root not in path.parents:
        return None, "plot path leaves the report folder"
    if not path.is_file():
        return None, "plot file missing"
    data = path.read_bytes()
    mime = next((m for magic, m in IMAGE_TYPES.items() if data.startswith(magic)), None)
    if mime is None:
        return None, "not a PNG, JPEG or GIF image"
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}", ""


def _summary(view: ReportView) -> str:
    rows = []
    for row in view.summary:
        verdict = check_verdict(row.cards)
        verdict_badge = badge(verdict, "models" if verdict == PER_MODEL else None)
        links = " ".join(badge(c.record.verdict, c.anchor, f"{c.label}: {c.record.verdict}") for c in row.cards)
        rows.append(
            f"<tr><td><b>{esc(row.claim_id)}</b></td><td>{esc(row.title)}</td>"
            f"<td>{verdict_badge}</td><td>{links or '<span class=muted>no record</span>'}</td></tr>"
        )
    head = "<tr><th>ID</th><th>claim</th><th>worst verdict</th><th>records</th></tr>"
    return f'<section id="summary"><h2>Summary</h2><table>{head}{"".join(rows)}</table></section>'


def _figure(figure: Figure) -> str:
    """A figure as an image (its data URI) with its title and caption."""
    return (
        f'<figure class="plot" id="{esc(figure.anchor)}"><img src="{esc(figure.uri)}" alt="{esc(figure.title)}">'
        f"<figcaption><b>{esc(figure.title)}.</b> {esc(figure.caption)}</figcaption></figure>"
    )


def _figures(figures: Figures) -> str:
    """The per-layer figures and the per-head maps of the probed models."""
    parts = [_figure(f) for f in (*figures.layers, *figures.heads, *filter(None, [figures.massive, figures.training]))]
    parts += [f'<p class="muted">{esc(note)}</p>' for note in figures.notes]
    if not parts:
        return ""
    return (
        '<section id="figures"><h2>Figures</h2><p class="muted">Drawn from the records of the probed '
        f"models (results.json); no new measurement.</p>{''.join(parts)}</section>"
    )


def _as_printed(view: ReportView) -> str:
    if not view.as_printed:
        body = "<p class=muted>No record reports a statement that fails as printed.</p>"
    else:
        rows = []
        for card, printed in view.as_printed:
            evidence = ", ".join(f"{esc(k)} = {esc(v)}" for k, v in as_printed_evidence(card.record))
            rows.append(
                f'<tr><td><a href="#{esc(card.anchor)}">{esc(card.record.id)}</a> '
                f'<span class="label">{esc(source_label(card))}</span></td><td>{esc(printed)}</td>'
                f"<td>{esc(card.record.statement)}</td><td>{evidence}</td></tr>"
            )
        head = "".join(
            f"<th>{h}</th>" for h in ("ID", "as printed in the seed", "corrected statement (checked)", "evidence")
        )
        body = f"<table><tr>{head}</tr>{''.join(rows)}</table>"
    return f'<section id="as-printed"><h2>Statements that fail as printed</h2>{body}</section>'


def _published(view: ReportView) -> str:
    """Published findings beside ours: one row per ``details["published"]`` entry of any record."""
    rows = "".join(
        f'<tr><td><a href="#{esc(card.anchor)}">{esc(card.record.id)}</a> <span class="label">{esc(card.label)}'
        f"</span></td>" + "".join(f"<td>{esc(entry[k])}</td>" for k in PUBLISHED_FIELDS) + "</tr>"
        for card, entry in published_rows(view)
    )
    if not rows:
        return ""
    head = "".join(f"<th>{h}</th>" for h in ("record", *PUBLISHED_FIELDS))
    return (
        '<section id="published"><h2>Published results beside ours</h2><p class="muted">Each row puts a '
        "published figure or finding next to our number on the same kind of measurement; the note says how "
        f'the settings differ.</p><div class="scroll"><table><tr>{head}</tr>{rows}</table></div></section>'
    )


def _card(card: Card, plot_root: Path | None) -> str:
    r = card.record
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in card_fields(r))
    metrics = "".join(
        f'<tr><td>{esc(k)}</td><td class="num">{esc(format_value(v))}</td></tr>' for k, v in r.metrics.items()
    )
    parts = [
        f'<article class="card" id="{esc(card.anchor)}"><header>'
        f'<h3>{esc(r.id)} <span class="label">{esc(card.label)}</span></h3>{badge(r.verdict)}</header>',
        f"<dl>{dl}</dl>",
    ]
    if metrics:
        parts.append(f'<table class="metrics"><tr><th>metric</th><th>value</th></tr>{metrics}</table>')
    controls = "".join(
        f"<tr><td>{esc(name)}</td><td>{esc(kind)}</td><td>{badge(verdict)}</td><td>{esc(expected)}</td>"
        f'<td class="num">{esc(numbers)}</td></tr>'
        for name, kind, verdict, expected, numbers in control_rows(r)
    )
    if controls:
        parts.append(
            '<table class="controls"><tr><th>control</th><th>kind</th><th>verdict</th>'
            f"<th>must be</th><th>numbers</th></tr>{controls}</table>"
        )
    if r.notes:
        parts.append(f'<p class="notes">{esc(r.notes)}</p>')
    for plot in r.plots:
        uri, reason = image_data_uri(plot_root, plot)
        if uri is None:
            parts.append(f'<p class="missing">plot {esc(plot)}: {esc(reason)}</p>')
        else:
            parts.append(f'<figure><img src="{uri}" alt="{esc(plot)}"><figcaption>{esc(plot)}</figcaption></figure>')
    text = details_text(r)
    if text:
        parts.append(f"<details><summary>details</summary><pre>{esc(text)}</pre></details>")
    parts.append("</article>")
    return "".join(parts)


def _environment(view: ReportView) -> str:
    stages = "".join(
        f"<tr><td>{esc(s.name)}</td><td>{badge(s.status)}</td><td class=num>{esc(wall(s))}</td>"
        f"<td class=num>{esc(cpu(s))}</td>"
        f"<td class=num>{s.records}</td><td>{esc(s.reason)}</td></tr>"
        for s in view.stages
    )
    env = "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in view.environment)
    stage_table = (
        "<h3>Run time per stage</h3><table><tr><th>stage</th><th>status</th><th>seconds</th><th>CPU seconds</th>"
        f"<th>records</th><th>reason</th></tr>{stages}</table>"
        if stages
        else ""
    )
    return (
        f'<section id="environment"><h2>Environment</h2>{stage_table}'
        f"<h3>Versions and provenance</h3><table>{env}</table></section>"
    )


def render_html(document: dict[str, Any], plot_root: Path | None, title: str = "expattn report") -> str:
    """The report page of a results document.

    Args:
        document: a results document (see ``document.build_view``).
        plot_root: folder that the records' ``plots`` paths are relative to (the results
            file's folder); ``None`` shows each plot as missing.
        title: page heading.

    Returns:
        The complete HTML text: the first screen (the per-model matrix beside the summary figure),
        summary table, every trained run's verdicts, figures, as-printed failures, one section per
        claim group with one card per record, and the environment.
    """
    view = build_view(document, title)
    counts = " ".join(
        f'<span class="kind" title="{esc(kind)}">{esc(kind)}: '
        + " ".join(badge(v, text=f"{n} {v}") for v, n in found.items())
        + "</span>"
        for kind, found in kind_counts(view.records).items()
    )
    models = list(dict.fromkeys(str(r.details["model"]) for r in view.records if r.details.get("model")))
    lead = lead_sentence(view.records, models)
    figures = report_figures(view.records, CLAIM_TITLES)
    first = first_screen(view.matrix, "" if figures.summary is None else _figure(figures.summary))
    runs = trained_runs(view.matrix)
    figure_section = _figures(figures)
    nav = ['<a href="#models">Per model</a>'] if first else []
    nav += [f'<a href="#{RUNS_ANCHOR}">Trained runs</a>'] if runs else []
    nav += ['<a href="#summary">Summary</a>'] + (['<a href="#figures">Figures</a>'] if figure_section else [])
    published = _published(view)
    nav += ['<a href="#as-printed">As printed</a>'] + (['<a href="#published">Published</a>'] if published else [])
    nav += [f'<a href="#group-{esc(letter)}">{esc(letter)}. {esc(name)}</a>' for letter, name, _ in view.groups]
    nav.append('<a href="#environment">Environment</a>')
    sections = "".join(
        f'<section id="group-{esc(letter)}"><h2>{esc(letter)}. {esc(name)}</h2>'
        + "".join(_card(c, plot_root) for c in cards)
        + "</section>"
        for letter, name, cards in view.groups
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(view.title)}</title><style>{CSS}{FIRST_SCREEN_CSS}</style></head>\n<body><main>"
        f'<header><h1>{esc(view.title)}</h1><p class="lead">{esc(lead)}</p>'
        f"<p class=\"pills\">{counts or '<span class=muted>no records</span>'}</p>"
        f"<nav>{' '.join(nav)}</nav></header>\n"
        f"{first}\n{_summary(view)}\n{runs}\n{figure_section}\n{_as_printed(view)}\n{published}\n{sections}\n"
        f"{_environment(view)}\n"
        "</main></body></html>\n"
    )
