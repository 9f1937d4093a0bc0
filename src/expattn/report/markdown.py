"""``report.md``: the same content as ``report.html`` in Markdown, plots linked by relative path.

Markdown renderers pass raw HTML through, so every user- or data-supplied string is
HTML-escaped and its Markdown punctuation backslash-escaped: a ``<script>`` in a model name
shows as text.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from expattn.report.cards import Card, format_value
from expattn.report.document import (
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
from expattn.report.matrix import MARK_LEGEND, PER_MODEL, RIVALS_LEGEND, RUNS_ANCHOR, check_verdict
from expattn.report.twins import twin_section
from expattn.results.seed_spread import spread_name

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(value: Any) -> str:
    """Inline-safe Markdown text: HTML-escaped, Markdown punctuation escaped, one line."""
    text = html.escape(" ".join(str(value).split()), quote=False)
    return _MD_SPECIAL.sub(r"\\\1", text)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return [*lines, ""]


def _summary(view: ReportView) -> list[str]:
    rows = []
    for row in view.summary:
        links = ", ".join(f"[{md(c.label)}: {md(c.record.verdict)}](#{c.anchor})" for c in row.cards)
        verdict = check_verdict(row.cards)
        shown = f"[{PER_MODEL}](#models)" if verdict == PER_MODEL else md(verdict)
        rows.append([f"**{md(row.claim_id)}**", md(row.title), shown, links or "no record"])
    return ["## Summary", "", *_table(["ID", "claim", "worst verdict", "records"], rows)]


def _matrix(view: ReportView) -> list[str]:
    """The claim x (model or sweep) table: verdict (linked to its card or the trained runs) and headline number
    per cell, then what each claim's number is."""
    matrix = view.matrix
    if matrix is None or not matrix.rows:
        return []
    rows = []
    for row in matrix.rows:
        cells = [
            "<br>".join(f"[{md(c.verdict)}](#{c.anchor}){md(c.mark)}" + (f" {md(c.value)}" if c.value else "")
                        for c in found)
            or "-"
            for found in row.cells
        ]
        rows.append([f"**{md(row.claim_id)}**", md(row.title), *cells])
    intro = (
        "Each cell: one model's own verdict (linked to its record) and the claim's headline number; verdicts "
        "are never pooled across models."
    )
    if matrix.runs:
        intro += (
            " A sweep's column pools the trained runs of that one sweep: the worst verdict over its runs and "
            "n/m runs (n of its m runs gave that verdict), acceptable only because every run's own verdict "
            f"and number is in [Trained runs](#{RUNS_ANCHOR})."
        )
    if matrix.marked:
        intro += f" {md(MARK_LEGEND)}."
    if matrix.rivalled:
        intro += f" {md(RIVALS_LEGEND)}."
    intro += (
        " The figures (headline measures against relative depth, per-layer curves, per-head maps, the "
        "massive-activation profile) are in report.html."
    )
    header = ["ID", "claim", *(md(c.name) for c in matrix.columns)]
    headlines = [f"- **{md(r.claim_id)}**: {md(r.headline)}" for r in matrix.rows if r.headline]
    return [
        '<a id="models"></a>',
        "",
        "## Per model",
        "",
        intro,
        "",
        *_table(header, rows),
        "Headline numbers (what each claim's cell shows):",
        "",
        *headlines,
        "",
    ]


def _trained_runs(view: ReportView) -> list[str]:
    """One row per trained run and claim: the run's own verdict (linked to its sweep's record) and number."""
    if view.matrix is None or not view.matrix.runs:
        return []
    rows = [
        [md(r.sweep), f"**{md(r.claim_id)}**", md(r.run), f"[{md(r.verdict)}](#{r.anchor})", md(r.value) or "-"]
        for r in view.matrix.runs
    ]
    intro = (
        "Every run of every training sweep with its own verdict and headline number (the median of its "
        "per-layer values), by sweep, claim and run; the per-model matrix shows each sweep's worst verdict over "
        "these rows."
    )
    return [
        f'<a id="{RUNS_ANCHOR}"></a>',
        "",
        "## Trained runs",
        "",
        intro,
        "",
        *_table(["sweep", "claim", "run", "verdict", "headline number"], rows),
    ]


def _as_printed(view: ReportView) -> list[str]:
    lines = ["## Statements that fail as printed", ""]
    if not view.as_printed:
        return [*lines, "No record reports a statement that fails as printed.", ""]
    rows = []
    for card, printed in view.as_printed:
        evidence = ", ".join(f"{md(k)} = {md(v)}" for k, v in as_printed_evidence(card.record))
        link = f"[{md(card.record.id)}](#{card.anchor}) {md(source_label(card))}".rstrip()
        rows.append([link, md(printed), md(card.record.statement), evidence])
    return [*lines, *_table(["ID", "as printed in the seed", "corrected statement (checked)", "evidence"], rows)]


def _published(view: ReportView) -> list[str]:
    rows = [
        [f"[{md(card.record.id)}](#{card.anchor}) {md(card.label)}", *(md(entry[k]) for k in PUBLISHED_FIELDS)]
        for card, entry in published_rows(view)
    ]
    if not rows:
        return []
    return ["## Published results beside ours", "", *_table(["record", *PUBLISHED_FIELDS], rows)]


def _card(card: Card, attachments: bool = True) -> list[str]:
    r = card.record
    lines = [f'<a id="{card.anchor}"></a>', "", f"### {md(r.id)}: {md(card.label)} ({md(r.verdict)})", ""]
    lines += [f"- **{name}**: {md(value)}" for name, value in card_fields(r)]
    lines.append("")
    if r.metrics:
        lines += _table(["metric", "value"], [[md(k), md(format_value(v))] for k, v in r.metrics.items()])
    controls = [[md(cell) for cell in row] for row in control_rows(r)]
    if controls:
        lines += _table(["control", "kind", "verdict", "must be", "numbers"], controls)
    if r.notes:
        lines += [f"*Notes*: {md(r.notes)}", ""]
    if not attachments:
        return lines
    for plot in r.plots:
        lines += [f"![{md(plot)}]({quote(plot)})", ""]
    text = details_text(r)
    if text:
        fence = "~~~~" if "~~~" in text else "~~~"
        lines += [
            "<details><summary>details</summary>",
            "",
            fence,
            html.escape(text, quote=False),
            fence,
            "",
            "</details>",
            "",
        ]
    return lines


def render_markdown(document: dict[str, Any], title: str = "expattn report", preface: str = "",
                    attachments: bool = True) -> str:
    """The report of a results document as Markdown.

    Args:
        document: a results document (see ``document.build_view``).
        title: top heading.
        preface: a paragraph under the heading (``docs/FINDINGS.md`` says where it comes from).
        attachments: each record's plots and details; without them (``docs/FINDINGS.md``) the text needs no
            files beside it and reads as a summary.

    Returns:
        Markdown text with the per-model matrix, the summary table, every trained run's verdicts, the
        as-printed failures, one section per claim group (one subsection per record, plots linked
        relative to the results file) and the environment; published findings beside ours where records carry them.
    """
    view = build_view(document, title)
    counts = ", ".join(f"{n} {md(v)}" for v, n in sorted(view.counts.items())) or "no records"
    lines = [
        f"# {md(view.title)}",
        "",
        *([preface, ""] if preface else []),
        f"Records: {counts}.",
        "",
        *_matrix(view),
        *twin_section(view.records, md),
        *_summary(view),
        *_trained_runs(view),
        *_as_printed(view),
        *_published(view),
    ]
    for letter, name, cards in view.groups:
        lines += [f"## {md(letter)}. {md(name)}", ""]
        for card in cards:
            lines += _card(card, attachments)
    lines += ["## Environment", ""]
    if view.stages:
        rows = [
            [md(s.name), md(s.status), wall(s), cpu(s), str(s.records), md(s.reason)] for s in view.stages
        ]
        header = ["stage", "status", "seconds", "CPU seconds", "records", "reason"]
        lines += ["### Run time per stage", "", *_table(header, rows)]
    lines += _table(["key", "value"], [[md(k), md(v)] for k, v in view.environment])
    return "\n".join(lines).rstrip() + "\n"


FINDINGS_PREFACE = (
    "Generated from [`results.json`](results.json), the results of the README's main command (`expattn report`, "
    "full mode, seed {seed}, commit `{revision}`), by `python scripts/findings.py`; do not edit by hand. Each record "
    "states its criterion and runs its controls through the same rule; plots and raw details are in the report "
    "itself (`report/report.html`)."
)


SPREAD_PREFACE = (
    "Each probed model's headline numbers at seeds {seeds} (`expattn probe --model MODEL --seeds {seed_list}` at "
    "its default budget, in [`seeds/`](seeds/)): the median over seeds, its range in brackets, and the verdict "
    "(one per seed, in order, where they differ); for a model probed with `--twin`, after \"twins:\", what its "
    "random-init twins made of the verdict at each seed (learned, architectural or undecided). The seed draws the "
    "text sample, the bootstrap and the baselines; a number quoted from one seed can sit anywhere in its range. "
    "*pending*: a hypothesis added after that model's seeds were run (run them again to fill it in)."
)


PENDING = "*pending*"  # the cell of a hypothesis that a model's seeds.json, older than it, does not hold


def _spread_cell(entry: dict[str, Any]) -> str:
    verdicts = entry["verdicts"]
    said = md(verdicts[0]) if len(set(verdicts)) == 1 else "**" + ", ".join(md(v) for v in verdicts) + "**"
    training = entry.get("training")
    if training:
        said += "; twins: " + (md(str(training[0])) if len(set(training)) == 1
                               else ", ".join(md(str(t)) for t in training))
    if entry["median"] is None:
        return said
    return f"{format_value(entry['median'])} [{format_value(entry['min'])}, {format_value(entry['max'])}] {said}"


def spread_section(spreads: list[dict[str, Any]]) -> list[str]:
    """The Markdown table of headlines over seeds: one row per hypothesis, one column per model's ``seeds.json``
    (``results.seed_spread.spread_document``)."""
    if not spreads:
        return []
    seeds = spreads[0]["seeds"]
    rows, order = {}, []
    for doc in spreads:
        for entry in doc["hypotheses"]:
            if entry["id"] not in rows:
                order.append(entry["id"])
                rows[entry["id"]] = [md(entry["id"]), md(entry["description"])]
    for doc in spreads:
        cells = {e["id"]: _spread_cell(e) for e in doc["hypotheses"]}
        for i in order:
            rows[i].append(cells.get(i, PENDING))
    preface = SPREAD_PREFACE.format(seeds=", ".join(map(str, seeds)), seed_list=",".join(map(str, seeds)))
    return ["## Headlines over seeds", "", preface, "",
            *_table(["ID", "headline", *(md(spread_name(d)) for d in spreads)], [rows[i] for i in order])]


def read_spreads(folder: Path) -> list[dict[str, Any]]:
    """The ``seeds.json`` documents of ``folder`` (``MODEL.json`` each), in the order of their file names."""
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]


def findings_markdown(document: dict[str, Any], spreads: list[dict[str, Any]] = ()) -> str:
    """``docs/FINDINGS.md``: the report of ``document`` without plots and details, under a preface naming its run
    and, from ``spreads`` (one ``seeds.json`` per model), each headline's median and range over seeds."""
    preface = FINDINGS_PREFACE.format(seed=document.get("seeds", {}).get("seed", "?"),
                                      revision=document.get("git_revision") or "unknown")
    section = spread_section(list(spreads))
    if section:
        preface = preface + "\n\n" + "\n".join(section).rstrip()
    return render_markdown(document, "What the report finds", preface=preface, attachments=False)
