r"""Layer dynamics of a trained ``LM``: hypotheses E1-E3 measured by ``expattn probe`` on its exported folder.

For every layer $\ell$, on a deterministic sample of sequences of the model's full context
(``expattn.probes.corpus``), the probe's estimators give (without the first token):

- **E1** $r_\ell = \overline{\operatorname{spread}}(x + \mathrm{Attn}(N_1 x)) / \overline{\operatorname{spread}}(x)$,
  raw and scale-normalised, with a 95% Poisson-bootstrap interval;
- **E2** the same ratio across each normalization, $N_1$ (on $x$) and $N_2$ (on $h$);
- **E3** the mean absolute excess kurtosis along random directions of the states entering each
  layer (depth ``L`` is the last block's output), and the participation ratio of their covariance;

with $\operatorname{spread}(X) = \tfrac1T\sum_t \lVert x_t - \bar x\rVert^2$ per sequence, averaged
over sequences, and the probe's verdict for each hypothesis (see ``expattn.probes.e1_expansion``,
``e2_normalization``, ``e3_gaussianity``). The sample is drawn from the whole corpus text, not
only its validation split.
"""

from __future__ import annotations

from pathlib import Path

from expattn.probes.runner import ProbeConfig, probe
from expattn.train.data import SHAKESPEARE

SWEEP_HYPOTHESES = ("E1", "E2", "E3")
# 256 sequences of the full context: 16,384 tokens at context 64, about 0.4 s per sweep model on one core.
PROBE_SEQUENCES = 256


def probe_config(model_dir: Path, corpus: str, context: int, seed: int = 0) -> ProbeConfig:
    """The probe's settings for a model trained on ``corpus`` (``shakespeare``, a text file or a folder)."""
    text = None if corpus == SHAKESPEARE else str(corpus)
    return ProbeConfig(model=str(model_dir), text=text, tokens=PROBE_SEQUENCES * context, seq_len=context,
                       seed=seed, hypotheses=SWEEP_HYPOTHESES)


def probe_dynamics(model_dir: Path, corpus: str, context: int, seed: int = 0) -> dict:
    """E1-E3 per layer of the model in ``model_dir`` (a folder of ``expattn.nn.export``).

    Args:
        model_dir: the exported model.
        corpus: what it was trained on (the probe reads the same text).
        context: the model's context, used as the probe's sequence length.
        seed: seed of the token sample and the bootstrap.

    Returns:
        ``layers``: per layer ``layer``, ``e1_raw_ratio`` (with ``_low``/``_high``),
        ``e1_normalized_ratio``, ``e2_norm1_ratio`` / ``e2_norm2_ratio`` (scale-normalised, with
        ``_low``/``_high``), ``e2_norm1_raw_ratio``, ``e2_norm2_raw_ratio``, ``e3_kurtosis``,
        ``e3_participation_ratio``; ``e3_output_kurtosis`` (last block's output); ``verdicts``
        (hypothesis -> the probe's verdict); ``tokens`` and ``seconds`` of the probe.

    Raises:
        ValueError: as ``expattn.probes.runner.probe`` (e.g. non-finite states of a diverged model).
    """
    outcome = probe(probe_config(model_dir, corpus, context, seed), None)
    rec = {r.id: r for r in outcome.records}
    for h in SWEEP_HYPOTHESES:
        if rec[h].verdict == "skipped":
            raise ValueError(f"the probe skipped {h}: {rec[h].notes}")
    e1, e2, e3 = rec["E1"].details, rec["E2"].details, rec["E3"].details
    rows = []
    for i in range(outcome.model["layers"]):
        row = {"layer": i}
        for key, source in (("e1_raw_ratio", e1["raw_ratio_excl"]),
                            ("e2_norm1_ratio", e2["norm1_normalized_ratio_excl"]),
                            ("e2_norm2_ratio", e2["norm2_normalized_ratio_excl"])):
            row.update({key: source["estimate"][i], f"{key}_low": source["low"][i], f"{key}_high": source["high"][i]})
        row.update({
            "e1_normalized_ratio": e1["normalized_ratio_excl"]["estimate"][i],
            "e2_norm1_raw_ratio": e2["norm1_raw_ratio_excl"]["estimate"][i],
            "e2_norm2_raw_ratio": e2["norm2_raw_ratio_excl"]["estimate"][i],
            "e3_kurtosis": e3["mean_abs_kurtosis_excl"]["estimate"][i],
            "e3_participation_ratio": e3["participation_ratio_excl"][i],
        })
        rows.append(row)
    return {
        "layers": rows,
        "e3_output_kurtosis": e3["mean_abs_kurtosis_excl"]["estimate"][-1],
        "verdicts": {h: rec[h].verdict for h in SWEEP_HYPOTHESES},
        "tokens": outcome.tokens,
        "seconds": outcome.seconds,
    }
