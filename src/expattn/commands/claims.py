"""``expattn claims``: the claim catalogue as a terminal table, one claim in full, or Markdown.

Without an ID: one row per claim (ID, title, kind, the commands that give it a verdict). With an
ID: its statement, where the seeds state it, what they print wrongly, the modules that implement
it, its tests and the command lines that reproduce its records. ``catalogue_markdown()`` is
``docs/CLAIMS.md``.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from expattn.catalogue import AS_PRINTED_KINDS, ENTRIES, GROUPS, Entry, entry
from expattn.report.markdown import md

PREAMBLE = """\
# Claim catalogue

Generated from `expattn.catalogue` by `expattn claims --markdown > docs/CLAIMS.md`; edit the
catalogue, not this file (a test checks that the two agree). `expattn claims ID` prints one
entry in the terminal.

Every claim of the seed documents has an ID here, and every check, simulation, probe record and
report card names the ID it covers. The seeds: `000` is the paper "A Probabilistic Interpretation
of Transformers" (attention as a gradient step on the log-normalizer of an exponential family;
the main source), `001` its appendix on Hopfield networks, `002` and `003` drafts of the same
paper (002 adds the Laplace-transform and Nadaraya-Watson view and asks whether a Gaussian is a
fixed point), `004` a blog post reading attention as an implicit mixture of energy-based models
(RBMs, cumulants, modern Hopfield networks, implicit layers).

Notation: natural parameter eta in R^D; carrier (intrinsic measure) h on R^D; sufficient statistic
u(x) = x unless said; G(eta) = log int h(x) exp(x.eta) dx, the log-normalizer;
p(x|eta) = h(x) exp(x.eta - G(eta)).

Kinds: **identity** and **inequality** are exact mathematics, checked in float64 on random
inputs against an independent computation (autograd, quadrature, torch.distributions, a convex
solver) by `expattn verify`; **dynamics** claims are about operators applied repeatedly to a cloud
of points, checked by `expattn simulate` with stated sizes, seeds and a statistical test or a
monotonicity check; **empirical** claims are hypotheses about trained transformers, measured by
`expattn probe` against null baselines with bootstrap intervals (verdict supported, not supported
or inconclusive).

Where a seed prints a claim wrongly, the project checks the corrected statement and reports that
the printed one fails. How the print is wrong:
"""


def producers(item: Entry) -> str:
    """The commands that give ``item`` a verdict: ``verify; simulate b2-collapse; probe``."""
    parts = []
    if item.verify:
        parts.append("verify")
    if item.presets:
        parts.append("simulate " + ", ".join(item.presets))
    if item.probe:
        parts.append("probe")
    return "; ".join(parts)


def claims_table() -> Table:
    """Every claim: ID, title, kind and the commands that produce its records."""
    table = Table(title="expattn claims", show_lines=False)
    for name in ("ID", "claim", "kind", "as printed", "checked by"):
        table.add_column(name, overflow="fold")
    for item in ENTRIES:
        printed = item.as_printed_kind or "-"
        table.add_row(escape(item.id), escape(item.title), escape(item.kind), escape(printed), escape(producers(item)))
    return table


def claim_details(item: Entry) -> Table:
    """One claim in full: statement, seeds, as printed, implementation, tests, how to reproduce."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    printed = "-"
    if item.as_printed is not None:
        printed = f"{item.as_printed}\n({item.as_printed_kind}: {AS_PRINTED_KINDS[item.as_printed_kind]})"
    rows = (
        ("claim", f"{item.id} {item.title} ({item.kind})"),
        ("statement", item.statement),
        ("seeds", item.seeds),
        ("as printed", printed),
        ("implementation", "\n".join(item.modules)),
        ("tests", "\n".join(item.tests)),
        ("reproduce", "\n".join(item.reproduce)),
    )
    for label, value in rows:
        grid.add_row(label, escape(value))
    return grid


def _links(paths: tuple[str, ...]) -> str:
    return ", ".join(f"[`{p}`](../{p})" for p in paths)


def _entry_markdown(item: Entry) -> list[str]:
    lines = [f'<a id="{item.id.lower()}"></a>', "", f"### {item.id} {md(item.title)}", ""]
    lines.append(f"- **statement** ({item.kind}): {md(item.statement)}")
    lines.append(f"- **seeds:** {md(item.seeds)}")
    if item.as_printed is not None:
        lines.append(f"- **as printed** ({item.as_printed_kind}): {md(item.as_printed)}")
    lines.append(f"- **implementation:** {_links(item.modules)}")
    lines.append(f"- **tests:** {_links(item.tests)}")
    lines.append(f"- **reproduce:** {', '.join(f'`{line}`' for line in item.reproduce)}")
    return [*lines, ""]


def catalogue_markdown() -> str:
    """The whole catalogue as Markdown: the text of ``docs/CLAIMS.md``."""
    lines = [PREAMBLE.rstrip("\n"), ""]
    lines += [f"- **{kind}**: {meaning}" for kind, meaning in AS_PRINTED_KINDS.items()]
    lines += ["", "| ID | claim | kind | as printed | checked by |", "|---|---|---|---|---|"]
    for item in ENTRIES:
        cells = (f"[{item.id}](#{item.id.lower()})", md(item.title), item.kind, item.as_printed_kind or "",
                 md(producers(item)))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for group in GROUPS:
        lines += [f"## {group.letter}. {md(group.title)}", "", f"Seeds: {md(group.seeds)}.", ""]
        if group.notes:
            lines += [md(group.notes), ""]
        for item in ENTRIES:
            if item.group == group.letter:
                lines += _entry_markdown(item)
    return "\n".join(lines).rstrip("\n") + "\n"


def show_claims(claim_id: str | None, markdown: bool, console: Console) -> None:
    """Print the table of all claims, or one claim in full; Markdown with ``markdown``.

    Raises:
        ValueError: ``claim_id`` is not in the catalogue (the message lists the IDs).
    """
    item = None if claim_id is None else entry(claim_id)
    if markdown:
        sys.stdout.write(catalogue_markdown() if item is None else "\n".join(_entry_markdown(item)))
    elif item is None:
        console.print(claims_table())
    else:
        console.print(claim_details(item))
