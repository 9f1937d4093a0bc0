r"""Layer dynamics of a trained ``LM``: hypotheses E1-E3 measured by ``expattn probe`` on its exported folder.

For every layer $\ell$, on a deterministic sample of sequences of the model's full context
(``expattn.probes.models.corpus``), the probe's estimators give (without the first token):

- **E1** $r_\ell = \overline{\operatorname{spread}}(x + \mathrm{Attn}(N_1 x)) / \overline{\operatorname{spread}}(x)$,
  raw and scale-normalised, with a 95% Poisson-bootstrap interval;
- **E2** the same ratio across each normalization, $N_1$ (on $x$) and $N_2$ (on $h$);
- **E3** the mean absolute excess kurtosis along random directions of the states entering each
  layer (depth ``L`` is the last block's output), and the participation ratio of their covariance;

with $\operatorname{spread}(X) = \tfrac1T\sum_t \lVert x_t - \bar x\rVert^2$ per sequence, averaged
over sequences, and the probe's verdict for each hypothesis (see ``expattn.probes.hypotheses.e1_expansion``,
``e2_normalization``, ``e3_gaussianity``). The sample is drawn from the whole corpus text, not
only its validation split.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from expattn.catalogue import headlines
from expattn.results.record import Record
from expattn.results.series import layer_series, layer_values

SWEEP_HYPOTHESES = ("E1", "E2", "E3")
# 256 sequences of the full context: 16,384 tokens at context 64, about 0.4 s per sweep model on one core.
PROBE_SEQUENCES = 256


@dataclass(frozen=True)
class LayerRow:
    """E1-E3 at one layer: spread ratios (``_low``/``_high``: the 95% interval), kurtosis and participation ratio.

    ``e1_raw_ratio``: E1 raw; ``e1_normalized_ratio``: E1 scale-normalised; ``e2_norm1_ratio`` /
    ``e2_norm2_ratio``: E2 scale-normalised across N1 / N2 (``e2_norm*_raw_ratio``: raw);
    ``e3_kurtosis`` and ``e3_participation_ratio``: E3 on the states entering the layer.
    """

    layer: int
    e1_raw_ratio: float
    e1_raw_ratio_low: float
    e1_raw_ratio_high: float
    e2_norm1_ratio: float
    e2_norm1_ratio_low: float
    e2_norm1_ratio_high: float
    e2_norm2_ratio: float
    e2_norm2_ratio_low: float
    e2_norm2_ratio_high: float
    e1_normalized_ratio: float
    e2_norm1_raw_ratio: float
    e2_norm2_raw_ratio: float
    e3_kurtosis: float
    e3_participation_ratio: float


@dataclass(frozen=True)
class LayerDynamics:
    """E1-E3 of one model: a row per layer, E3 on the last block's output, the probe's verdicts
    (hypothesis -> verdict), the probe's ``tokens`` and ``seconds``, and each hypothesis's headline number
    (hypothesis -> the record's metric named by ``catalogue.headlines``, as the probe's table shows it)."""

    layers: tuple[LayerRow, ...]
    e3_output_kurtosis: float
    verdicts: Mapping[str, str]
    tokens: int
    seconds: float
    headlines: Mapping[str, float] = field(default_factory=dict)


def layer_dynamics(records: list[Record], layers: int, tokens: int, seconds: float) -> LayerDynamics:
    """``LayerDynamics`` from the probe's records E1-E3 of a model with ``layers`` blocks.

    Raises:
        ValueError: a record of E1-E3 is missing, skipped, or lacks a per-layer series.
    """
    rec = {r.id: r for r in records}
    missing = [h for h in SWEEP_HYPOTHESES if h not in rec]
    if missing:
        raise ValueError(f"records must include {', '.join(SWEEP_HYPOTHESES)}, missing {', '.join(missing)}")
    e1, e2, e3 = (rec[h] for h in SWEEP_HYPOTHESES)
    raw, n1, n2 = (layer_series(r, name) for r, name in ((e1, "raw_ratio_excl"),
                                                         (e2, "norm1_normalized_ratio_excl"),
                                                         (e2, "norm2_normalized_ratio_excl")))
    normalized = layer_series(e1, "normalized_ratio_excl").estimate
    n1_raw = layer_series(e2, "norm1_raw_ratio_excl").estimate
    n2_raw = layer_series(e2, "norm2_raw_ratio_excl").estimate
    kurtosis = layer_series(e3, "mean_abs_kurtosis_excl").estimate
    participation = layer_values(e3, "participation_ratio_excl")
    rows = tuple(
        LayerRow(i, raw.estimate[i], raw.low[i], raw.high[i], n1.estimate[i], n1.low[i], n1.high[i],
                 n2.estimate[i], n2.low[i], n2.high[i], normalized[i], n1_raw[i], n2_raw[i], kurtosis[i],
                 participation[i])
        for i in range(layers)
    )
    keys = headlines()
    numbers = {h: float(rec[h].metrics[keys[h][0]]) for h in SWEEP_HYPOTHESES if keys[h][0] in rec[h].metrics}
    return LayerDynamics(rows, kurtosis[-1], {h: rec[h].verdict for h in SWEEP_HYPOTHESES}, tokens, seconds, numbers)


# ``dynamics(model_dir, corpus, context, seed)``: E1-E3 of an exported model; the command layer gives the probe
# (``expattn.commands.sweep_probe.probe_dynamics``), so this package imports no probe.
ProbeDynamics = Callable[[Path, str, int, int], LayerDynamics]
