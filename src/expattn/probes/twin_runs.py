"""A model's random-init twins probed apart from the model's own run: a twin as a stage of its own (a report runs it
beside the model's), and the twins a run stopped among them had left (``--resume``).

Both feed the token ids ``run_probe(config)`` fed the model, remade from the same text, sample and seed with the
model's weights released (``runner.with_twins``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch

from expattn.probes.config import ProbeConfig
from expattn.probes.models.corpus import Sequences, load_text, sequences
from expattn.probes.models.subject import Subject
from expattn.probes.progress import Stage, reporter
from expattn.probes.runner import ProbeOutcome, Stages, load, release_weights, twin_records, with_twins
from expattn.results.record import Record


def probe_twin_of(config: ProbeConfig, seed: int, progress: Callable[..., None] | None = None) -> list[Record]:
    """The records of ``config.model``'s random-init twin of initialisation ``seed`` alone, on the token ids
    ``run_probe(config)`` feeds the model (the same text, sample and seed): the twin as a stage of its own, which a
    report runs beside the model's."""
    subject, fed, device = _fed_without_weights(config, progress)
    return twin_records(subject, config, fed, seed, progress=progress, device=device)


def twins_after(model: ProbeOutcome, config: ProbeConfig, stages: Stages,
                progress: Callable[..., None] | None = None) -> ProbeOutcome:
    """``model``, the outcome of ``config``'s model that ``stages`` kept (a run stopped among its twins), with its
    twins attached: those ``stages`` holds read back, the others probed on the token ids ``run_probe(config)`` fed
    the model. Its ``seconds`` add this run's and the kept twins' to the model's."""
    start = time.perf_counter()
    subject, fed, device = _fed_without_weights(config, progress)
    model.records, before = with_twins(subject, config, fed, model.records, 0, None, device, stages)
    model.seconds += time.perf_counter() - start + before
    return model


def _fed_without_weights(config: ProbeConfig, progress: Callable[..., None] | None,
                         ) -> tuple[Subject, Sequences, torch.device]:
    """``config.model`` loaded, the token ids ``run_probe(config)`` feeds it (the same text, sample and seed), and
    its device, with its weights released: its twins need its class, config and ids, not its weights."""
    text = load_text(config.corpus, config.text)
    if int(os.environ.get("RANK", "0")) == 0:
        reporter(progress)(Stage("loading", 0, 1))
    subject = load(config)
    torch.manual_seed(config.seed)
    fed = sequences(subject, config.seq_len, config.tokens, config.seed, text=text)
    device = subject.device
    release_weights(subject, config)
    return subject, fed, device
