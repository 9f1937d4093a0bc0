"""The probe of a sweep's trained models: E1-E3 of an exported ``LM`` folder (``sweeps.layer_dynamics``), the
``dynamics`` that ``expattn train --sweep`` and the report's training stage hand to ``sweeps.run.run_sweep``."""

from __future__ import annotations

from pathlib import Path

from expattn.probes.runner import ProbeConfig, run_probe
from expattn.sweeps.layer_dynamics import PROBE_SEQUENCES, SWEEP_HYPOTHESES, LayerDynamics, layer_dynamics
from expattn.train.data import SHAKESPEARE


def probe_config(model_dir: Path, corpus: str, context: int, seed: int = 0) -> ProbeConfig:
    """The probe's settings for a model trained on ``corpus`` (``shakespeare``, a text file or a folder):
    ``PROBE_SEQUENCES`` sequences of the model's full ``context``, E1-E3."""
    text = None if corpus == SHAKESPEARE else str(corpus)
    return ProbeConfig(model=str(model_dir), text=text, tokens=PROBE_SEQUENCES * context, seq_len=context,
                       seed=seed, hypotheses=SWEEP_HYPOTHESES)


def probe_dynamics(model_dir: Path, corpus: str, context: int, seed: int = 0) -> LayerDynamics:
    """E1-E3 per layer of the model in ``model_dir`` (a folder of ``expattn.nn.export``).

    Args:
        model_dir: the exported model.
        corpus: what it was trained on (the probe reads the same text).
        context: the model's context, used as the probe's sequence length.
        seed: seed of the token sample and the bootstrap.

    Raises:
        ValueError: as ``expattn.probes.runner.run_probe`` (e.g. non-finite states of a diverged model), or
            the probe skipped one of E1-E3.
    """
    outcome = run_probe(probe_config(model_dir, corpus, context, seed), None)
    return layer_dynamics(outcome.records, outcome.model["layers"], outcome.tokens, outcome.seconds)
