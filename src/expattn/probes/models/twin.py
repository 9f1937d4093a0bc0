"""A probed model's random-init twin: the same architecture at its own initialisation, fed the same token ids.

The twin of a HuggingFace model is ``type(model)._from_config(config)`` (what ``AutoModel.from_config`` calls)
of a copy of its config, built under ``torch.manual_seed(seed)`` in the model's dtype on the model's device; the
twin of expattn's own LM is ``LM(cfg)`` under the same seed, which is exactly the LM at step 0 of
``expattn train --seed seed``. The global random state is left as it was (``torch.random.fork_rng``).

``probe_twin`` feeds the twin the token ids the probe fed the trained model, ``(sequences, seq_len)``
(``probe_subject(..., input_ids=...)``): the ids ``Sequences.item`` kept, not a second tokenisation; a vision
model's synthetic images depend only on the probe's seed and need nothing.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import torch
from torch import nn

from expattn.nn.lm import LM
from expattn.probes.models.corpus import Sequences
from expattn.probes.models.lm_adapter import ProbedLM
from expattn.probes.models.subject import Subject, subject_from_model
from expattn.results.record import Record, error_record


def twin_model(model: nn.Module, seed: int = 0, device: torch.device | None = None) -> nn.Module:
    """A fresh, randomly initialised model of ``model``'s class and config, in its dtype and on its device (or
    ``device``: where the model was before its weights went to the ``meta`` device), in eval mode; ``model`` and the
    global random state are untouched.

    Raises:
        TypeError: ``model`` is neither a HuggingFace ``PreTrainedModel`` nor expattn's probed LM.
    """
    param = next(model.parameters())
    device = param.device if device is None else device
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(seed)
        if isinstance(model, ProbedLM):
            return ProbedLM(LM(model.lm.cfg)).to(device, param.dtype).eval()
        build = getattr(type(model), "_from_config", None)
        if build is None:
            raise TypeError(f"model must be a HuggingFace PreTrainedModel or an expattn LM to build a random-init "
                            f"twin, got {type(model).__name__}")
        with torch.device(device):
            twin = build(copy.deepcopy(model.config), dtype=param.dtype)
    return twin.eval()


def twin_subject(subject: Subject, seed: int = 0, device: torch.device | None = None) -> Subject:
    """The ``Subject`` of ``subject``'s twin (``twin_model``, on ``device`` when given): the same tokenizer, name
    ``"<name> (random init)"``, its own reading of the module tree where the model has no hand-written adapter."""
    twin = subject_from_model(twin_model(subject.model, seed, device), subject.tokenizer,
                              name=f"{subject.name} (random init)")
    twin.model_type, twin.config = subject.model_type, subject.config
    return twin


def probe_twin(subject: Subject, run: Callable[[Subject, torch.Tensor | None], list[Record]], *, seed: int,
               fed: Sequences, hypotheses: tuple[str, ...], device: torch.device | None = None) -> list[Record]:
    """The twin's records: ``run(twin_subject(subject, seed), ids)`` on the token ids the trained model was fed, the
    items of ``fed`` stacked ``(sequences, seq_len)`` (None for a vision model, whose images depend on the seed
    only). A twin that cannot be built or probed gives one ``error`` record per hypothesis (the exception in its
    notes): the trained model's records stand, and their twin control says ``error``."""
    try:
        ids = None if subject.image is not None else torch.stack([fed.item(i) for i in range(fed.count)])
        return run(twin_subject(subject, seed, device), ids)
    except Exception as err:  # the trained records are measured: the twin's failure is recorded beside them
        return [error_record(h, "empirical", "twin", err) for h in hypotheses]
