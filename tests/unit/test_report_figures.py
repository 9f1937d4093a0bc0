"""The report's figures: per-layer numbers read from records unchanged, one line per model, per-head
maps, malformed details give no figure (not an error), hostile model names stay text in the SVG."""

from __future__ import annotations

import base64
import re

import numpy as np
import pytest
from test_report_html import EVIL, parse

from expattn.catalogue.entry import CURVE_READERS
from expattn.report.document import CLAIM_TITLES
from expattn.report.figures import report_figures
from expattn.report.figures_series import HEADLINE_CURVES, READERS, grid, interval, interval_keys
from expattn.report.html import CSP, render_html
from expattn.results.record import Record, results_document


def probe(claim: str, model: str, details: dict) -> Record:
    return Record(id=claim, kind="empirical", verdict="supported",
                  details={"stage": "probe", "model": model, **details})


def band(est: list[float]) -> dict[str, list[float]]:
    return {"estimate": est, "low": [v - 0.1 for v in est], "high": [v + 0.1 for v in est]}


def records(gen) -> list[Record]:
    """Two models of different depth (3 and 5 layers) with E1, E4, E5, E8 (E8 with its per-head margins in the
    deeper model only); a verify record."""
    out = [Record(id="A3", kind="identity", verdict="pass", details={"stage": "verify"})]
    for model, layers in (("small", 3), (f"deep{EVIL}", 5)):
        ratio = (1 + torch_rand(gen, layers)).tolist()
        heads = torch_rand(gen, layers * 4).reshape(layers, 4)
        out += [
            probe("E1", model, {"raw_ratio_excl": band(ratio), "raw_ratio_all": band(ratio)}),
            probe("E4", model, {"cos_sigma_inv": (torch_rand(gen, layers * 4).reshape(layers, 4) - 0.5).tolist()}),
            probe("E5", model, {"identity_f32": (1e-7 + 1e-6 * heads).tolist()}),
            probe("E8", model, {"mean_pairwise_cos": band((torch_rand(gen, layers) - 0.5).tolist())}
                  | ({} if model == "small" else {"head_coherence": (heads - 0.5).tolist()})),
        ]
    return out


def torch_rand(gen, n: int) -> np.ndarray:
    import torch

    return torch.rand(n, generator=gen, dtype=torch.float64).numpy()


def svg(uri: str) -> str:
    head, data = uri.split(",", 1)
    assert head == "data:image/svg+xml;base64"
    return base64.b64decode(data).decode("utf-8")


def test_series_read_the_records_numbers():
    # Relative depth i / (n - 1); numbers written as text come back as non-finite floats.
    series = interval({"x": {"estimate": [1.0, "nan", 3.0], "low": [0, 0, 0], "high": [4, 4, 4]}}, "x")
    assert series.estimate[0] == 1.0 and np.isnan(series.estimate[1]) and series.low == (0.0, 0.0, 0.0)
    np.testing.assert_array_equal(series.depth, [0.0, 0.5, 1.0])
    # E4: median over heads and quartiles (linear interpolation): heads 1, 2, 3, 4 -> 2.5, 1.75, 3.25.
    [e4] = HEADLINE_CURVES["E4"].read({"cos_sigma_inv": [[1, 2, 3, 4], [4, 3, 2, 1]]})
    assert e4.estimate == (2.5, 2.5) and e4.low == (1.75, 1.75) and e4.high == (3.25, 3.25)
    # E5: maximum over heads, band min..max.
    [e5] = HEADLINE_CURVES["E5"].read({"identity_f32": [[1e-7, 3e-7], [5e-7, 2e-7]]})
    assert e5.estimate == (3e-7, 5e-7) and e5.low == (1e-7, 2e-7)
    # E7: decades lost since depth 0, -log10 of the residual relative to it (0.5 / 5 -> 1).
    [e7] = HEADLINE_CURVES["E7"].read({"res_no_skip": [[5.0, 0.5, 0.005]]})
    assert e7.estimate == pytest.approx((0.0, 1.0, 3.0), abs=1e-12)
    # An _all entry is left out where its _excl twin exists.
    assert interval_keys({"a_all": band([1.0]), "a_excl": band([1.0]), "b_all": band([1.0])}) == ["a_excl", "b_all"]


@pytest.mark.parametrize("bad", [None, "text", [], [1, "a"], [True], {"estimate": [1], "low": [1]},
                                 {"estimate": [1, 2], "low": [1], "high": [1]}, [[1, 2], [3]]])
def test_malformed_details_give_no_series(bad):
    assert interval({"x": bad}, "x") is None
    assert grid(bad) is None
    for curve in HEADLINE_CURVES.values():
        assert curve.read({"raw_ratio_excl": bad, "cos_sigma_inv": bad, "identity_f32": bad}) == []
    assert HEADLINE_CURVES["E7"].read({"res_no_skip": [bad]}) == []
    assert HEADLINE_CURVES["E7"].read({"res_no_skip": [[0.0, 1.0]]}) == []  # no ratio to a zero residual


def test_figures_of_two_models(gen):
    figures = report_figures(records(gen), CLAIM_TITLES)
    summary = svg(figures.summary.uri)
    # One legend entry per model (the hostile name as escaped text, never as markup).
    assert "small" in summary and "deep&lt;script&gt;alert(1)&lt;/script&gt;" in summary
    assert "<script" not in summary
    assert [f.anchor for f in figures.layers] == ["fig-layers-E1", "fig-layers-E8"]
    assert "raw_ratio_excl" in figures.layers[0].caption and "raw_ratio_all" not in figures.layers[0].caption
    assert [f.anchor for f in figures.heads] == ["fig-heads-E4", "fig-heads-E5", "fig-heads-E8"]
    # One layer x head map per model that has the numbers: E8's only in the deeper model, so no note.
    heads = svg(figures.heads[0].uri)
    assert len(re.findall(r'<g id="QuadMesh_\d+"', heads)) == 2
    assert len(re.findall(r'<g id="QuadMesh_\d+"', svg(figures.heads[2].uri))) == 1
    assert "head_coherence" in figures.heads[2].caption and not figures.notes
    # E8 records without per-head numbers (older results): no map, and a note says why.
    older = [r for r in records(gen) if r.id != "E8" or "head_coherence" not in r.details]
    figures = report_figures(older, CLAIM_TITLES)
    assert [f.anchor for f in figures.heads] == ["fig-heads-E4", "fig-heads-E5"]
    assert len(figures.notes) == 1 and "E8" in figures.notes[0] and "head_coherence" in figures.notes[0]


def test_no_probe_record_no_figure():
    figures = report_figures([Record(id="A3", kind="identity", verdict="pass", details={"stage": "verify"})],
                             CLAIM_TITLES)
    assert figures.summary is None and not figures.layers and not figures.heads and not figures.notes
    malformed = [probe("E1", "m", {"raw_ratio_excl": {"estimate": "x"}}),
                 probe("E4", "m", {"cos_sigma_inv": [[1], []]})]
    figures = report_figures(malformed, CLAIM_TITLES)
    assert figures.summary is None and not figures.layers and not figures.heads


def test_page_places_summary_figure_after_matrix(gen):
    text = render_html(results_document(records(gen), "test"), None)
    page = parse(text)
    assert text.index('id="models"') < text.index('id="fig-summary"') < text.index('id="summary"')
    assert text.index('id="summary"') < text.index('id="figures"') < text.index('id="fig-heads-E5"')
    assert f'content="{CSP}"' in text and "img-src data:" in CSP
    images = re.findall(r'<img src="([^"]*)"', text)
    assert len(images) == 1 + 2 + 3 and all(i.startswith("data:image/svg+xml;base64,") for i in images)
    assert EVIL not in text.replace("&lt;", "<").split("<main>")[0]  # nothing in the head
    assert page.rows["models"][0][3:] == ["small", f"deep{EVIL}"]  # the matrix above the figure, names as text


def test_massive_profile_draws_each_models_maxima_and_their_ratio_to_the_median():
    rows = [{"layer": i, "max": m, "median": 1.5, "channel": 7, "position": 0, "tokens": 0}
            for i, m in enumerate((2.0, 300.0, 24926.0))]
    recs = [probe("E3", f"big{EVIL}", {"massive_activations": {"per_layer": rows}}),
            probe("E3", "none", {"massive_activations": None}), probe("E1", "none", {"raw_ratio_excl": band([1.0])})]
    figures = report_figures(recs, CLAIM_TITLES)
    assert figures.massive is not None and "100" in figures.massive.caption and "1000" in figures.massive.caption
    drawn = svg(figures.massive.uri)
    assert "big&lt;script&gt;alert(1)&lt;/script&gt;" in drawn and "<script" not in drawn
    # three-point paths: the one profile in each of the two panels and the legend's sample; the model without a
    # profile draws nothing
    assert len(re.findall(r'<g id="line2d_\d+">\s*<path d="M[^"L]*L[^"L]*L[^"L]*"', drawn)) == 3
    assert report_figures(recs[1:], CLAIM_TITLES).massive is None
    page = render_html(results_document(recs, "test"), None)
    assert page.index('id="figures"') < page.index('id="fig-massive"')


def test_the_report_reads_every_curve_the_catalogue_can_declare():
    assert tuple(READERS) == CURVE_READERS
