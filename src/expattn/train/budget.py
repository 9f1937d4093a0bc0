"""The memory a training run needs, checked before any work (``expattn.memory``)."""

from __future__ import annotations

import os

import torch

from expattn.memory import require, training_bytes
from expattn.nn.lm import LM, LMConfig
from expattn.train.distributed import resolve_device


def check_training_memory(model_cfg: LMConfig, batch: int, device: str) -> None:
    """Raise ``ValueError`` (needed vs available) if one process's share of a training step cannot fit.

    The parameters are counted on a model built on the ``meta`` device (no memory); each process of a
    ``torchrun`` launch holds the model and ``batch / WORLD_SIZE`` sequences.
    """
    with torch.device("meta"):
        params = sum(p.numel() for p in LM(model_cfg).parameters())
    share = max(batch // int(os.environ.get("WORLD_SIZE", "1")), 1)
    c = model_cfg
    needed = training_bytes(params, share, c.context, c.dim, c.layers, c.vocab_size)
    what = f"training (batch {batch}, context {c.context}, dim {c.dim}, {c.layers} layers, {params:,} parameters)"
    require(needed, resolve_device(device), what)
