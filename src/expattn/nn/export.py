"""A loadable copy of a trained ``LM``: ``config.json`` plus ``model.safetensors`` in one folder.

``config.json`` holds ``"model_type": "expattn-lm"``, every ``LMConfig`` field, the context
length again as ``n_positions`` and the width as ``hidden_size`` (the keys the probe reads from
HuggingFace configs), and the character vocabulary (``vocab``: token ``i`` is ``vocab[i]``).
The weights are safetensors only; the tied output matrix is stored once. ``expattn probe
--model DIR`` loads such a folder (``expattn.probes.models.lm_adapter``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from safetensors.torch import load_model, save_model

from expattn.nn.lm import LM, LMConfig
from expattn.results.files import staged

MODEL_TYPE = "expattn-lm"
MODEL_DIR = "model"
CONFIG = "config.json"
WEIGHTS = "model.safetensors"


def export_model(model: LM, vocab: str, out: Path) -> Path:
    """Write ``model`` and its vocabulary into the folder ``out`` (replaced as a whole).

    The files are written into a temporary sibling folder that then takes the place of ``out``,
    so a reader never sees a config without its weights.

    Args:
        model: the trained model (any device; saved as it is).
        vocab: the sorted characters of its corpus, ``len(vocab) == model.cfg.vocab_size``.
        out: the folder to create or replace.

    Returns:
        ``out``.
    """
    if not isinstance(model, LM):
        raise TypeError(f"model must be an expattn.nn.lm.LM, got {type(model).__name__}")
    if not isinstance(vocab, str) or len(vocab) != model.cfg.vocab_size:
        raise ValueError(f"vocab must be a string of {model.cfg.vocab_size} characters, got {vocab!r:.60}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": MODEL_TYPE,
        **dataclasses.asdict(model.cfg),
        "n_positions": model.cfg.context,
        "hidden_size": model.cfg.dim,
        "vocab": vocab,
    }
    with staged(out) as tmp:
        save_model(model, str(tmp / WEIGHTS))
        (tmp / CONFIG).write_text(json.dumps(config, indent=1))
    return out


def load_exported(path: Path, config: dict) -> tuple[LM, str]:
    """The model (float32, eval mode, on CPU) and vocabulary of a folder written by ``export_model``.

    Args:
        path: the folder.
        config: its parsed ``config.json``.

    Raises:
        ValueError: a config that is not a valid ``LMConfig`` or whose vocabulary does not match,
            missing weights, or weights that do not fit the config.
    """
    config = {"bias": True, **config}  # exports written before the option have biases
    fields = {f.name for f in dataclasses.fields(LMConfig)}
    missing = sorted(fields - set(config))
    if missing:
        raise ValueError(f"{path / CONFIG} lacks the LMConfig fields {', '.join(missing)}")
    cfg = LMConfig(**{k: config[k] for k in fields})
    vocab = config.get("vocab")
    if not isinstance(vocab, str) or len(vocab) != cfg.vocab_size or "".join(sorted(set(vocab))) != vocab:
        raise ValueError(f"{path / CONFIG}: vocab must be {cfg.vocab_size} distinct sorted characters")
    if not (path / WEIGHTS).is_file():
        raise ValueError(f"model directory {str(path)!r} has no {WEIGHTS}")
    model = LM(cfg)
    try:
        load_model(model, str(path / WEIGHTS), strict=True, device="cpu")
    except Exception as err:  # a corrupt file or a shape mismatch: the folder is not this config's model
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ValueError(f"cannot load {path / WEIGHTS}: {first}") from err
    return model.float().eval(), vocab
