"""The report's figures, drawn from the records of probed models (no new measurement).

- the summary: each hypothesis's headline measure per layer against relative depth, one line per
  model, with its band (``figures_curves.summary_uri``);
- per hypothesis, every per-layer interval of its records, models overlaid (``layer_uri``);
- per-head maps, layer x head, for E4's alignment, E5's error and E8's coherence (``figures_heads.head_uri``);
- the massive-activation profile from E3's records (``figures_massive.massive_uri``);
- a training sweep's headlines against the training step (``figures_training.training_uri``).

Each figure is an SVG data URI with a title and a caption; renderers place them (``report.html``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from expattn.report.figures_curves import layer_uri, summary_uri
from expattn.report.figures_heads import head_uri
from expattn.report.figures_massive import ABSOLUTE, RATIO, massive_uri
from expattn.report.figures_series import HEAD_MAPS, HEADLINE_CURVES, probe_records
from expattn.report.figures_training import training_uri
from expattn.results.record import Record

RELATIVE_DEPTH = "relative depth i / (n - 1): 0 the first layer (E3: the embeddings), 1 the last"


@dataclass(frozen=True)
class Figure:
    """One figure: anchor, title, caption and its image as a data URI."""

    anchor: str
    title: str
    caption: str
    uri: str


@dataclass(frozen=True)
class Figures:
    """The summary figure (None: no probe record), per-layer figures, per-head maps, notes on
    figures that the records cannot give, and the massive-activation profile (None: no E3 profile)."""

    summary: Figure | None
    layers: tuple[Figure, ...]
    heads: tuple[Figure, ...]
    notes: tuple[str, ...]
    massive: Figure | None = None
    training: Figure | None = None


def summary_caption(claims: Sequence[str]) -> str:
    """Caption of the summary figure for the hypotheses it shows."""
    bands = "; ".join(f"{c}: {HEADLINE_CURVES[c].band}" for c in claims if c in HEADLINE_CURVES)
    return (f"Each hypothesis's headline measure per layer against {RELATIVE_DEPTH}; one colour per model; "
            f"dotted: the value of no effect. Bands: {bands}. The matrix's number summarises each curve "
            "(median over layers; E5 its maximum, E7 its last depth).")


def report_figures(records: Sequence[Record], titles: dict[str, str]) -> Figures:
    """All figures of ``records`` (only probe records are drawn; the others give no figure).

    Args:
        records: the results document's records, in order.
        titles: short claim titles by ID (panel titles).
    """
    probed = probe_records(list(records))
    claims = list(dict.fromkeys(r.id for r in probed))
    uri = summary_uri(probed, titles) if probed else None
    summary = None if uri is None else Figure(
        "fig-summary", "Summary: headline measures against relative depth", summary_caption(claims), uri)
    layers = []
    for claim in claims:
        uri, keys = layer_uri(probed, claim)
        if uri is not None:
            layers.append(Figure(
                f"fig-layers-{claim}", f"{claim} {titles.get(claim, '')}".strip() + ": per layer",
                f"Per-layer estimates with 95% intervals ({', '.join(keys)}) against {RELATIVE_DEPTH}; "
                "one colour per model. Where a quantity exists for all tokens and without first/special and "
                "massive tokens, the latter (the verdict's reading) is shown.", uri))
    heads, notes = [], []
    for claim in HEAD_MAPS:
        uri = head_uri(probed, claim)
        key, label = HEAD_MAPS[claim].key, HEAD_MAPS[claim].text
        if uri is not None:
            heads.append(Figure(f"fig-heads-{claim}", f"{claim}: per head",
                                f"{label}, per layer (rows, first at the top) and head (columns); one panel per "
                                f"model, one colour scale for all ({key} in the record's details).", uri))
        elif claim in claims:
            notes.append(f"{claim}'s records hold no {key} (a number per layer and head), so there is no layer x "
                         "head map of it; its per-layer numbers are drawn in the summary and per-layer figures.")
    uri = massive_uri(probed)
    massive = None if uri is None else Figure(
        "fig-massive", "Massive activations (Sun et al. 2024): largest |x| per depth",
        f"Largest |x| of the residual stream at each depth (0: the embeddings) against {RELATIVE_DEPTH}, and the "
        f"same over the depth's median |x|; dotted: the rule's thresholds |x| = {ABSOLUTE:g} and {RATIO:g} x the "
        "median (a depth has massive activations where a curve is above both). From E3's records.", uri)
    uri = training_uri(records)
    training = None if uri is None else Figure(
        "fig-training", "Hypotheses along training: headline against the training step",
        "Each training sweep's run probed at its initialisation (step 0), at 10% and 30% of its steps and at the "
        "end, by the same probe (E1-E3, the same sample and seed); one colour per run; a filled marker where the "
        "point's verdict accepts the hypothesis, hollow otherwise. The numbers: sweep.json's runs[].curve.", uri)
    return Figures(summary, tuple(layers), tuple(heads), tuple(notes), massive, training)
