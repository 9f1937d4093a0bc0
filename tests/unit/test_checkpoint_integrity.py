"""The checkpoint digest covers everything a resume reads (header fields included); a missing part is named."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load, save

from expattn.nn.lm import LM, LMConfig
from expattn.train.checkpoint import _digest, read_checkpoint, save_checkpoint
from expattn.train.optim import adamw

CFG = LMConfig(vocab_size=5, context=4, layers=1, heads=2, dim=8)


@pytest.fixture
def saved(gen, tmp_path):
    torch.manual_seed(0)
    model = LM(CFG)
    opt = adamw(model, 1e-2, 0.1)
    idx = torch.randint(0, 5, (2, 4), generator=gen)
    _, loss = model(idx, idx)
    loss.backward()
    opt.step()
    path = tmp_path / "ck.safetensors"
    save_checkpoint(path, 60, model, opt, {"data": gen.get_state(), "torch": torch.get_rng_state()}, {"k": 1})
    return path


def _parts(path):
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return load(data), json.loads(data[8 : 8 + n])["__metadata__"]


def _write(path, tensors, header, *, forge=False):
    """Rewrite the file; ``forge`` recomputes the digest (a deliberate edit, not a corruption)."""
    if forge:
        header = {**header, "sha256": _digest(tensors, header)}
    path.write_bytes(save(tensors, metadata=header))


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("step", lambda v: "30"),
        ("param_groups", lambda v: v.replace('"weight_decay": 0.1', '"weight_decay": 0.0')),
        ("param_groups", lambda v: v.replace('"eps": 1e-08', '"eps": 1e-06')),
        ("meta", lambda v: json.dumps({"k": 2})),
        ("parts", lambda v: v.replace('"data", ', "")),
    ],
)
def test_edited_header_fields_fail_the_digest(saved, field, edit):
    tensors, header = _parts(saved)
    changed = edit(header[field])
    assert changed != header[field]  # the edit hit something
    _write(saved, tensors, {**header, field: changed})
    with pytest.raises(ValueError, match="SHA-256 does not match"):
        read_checkpoint(saved)


@pytest.mark.parametrize(("prefix", "what"), [("optim.", "optimizer state"), ("rng.data", "RNG state")])
def test_a_missing_part_is_named_even_with_a_recomputed_digest(saved, prefix, what):
    tensors, header = _parts(saved)
    kept = {k: v for k, v in tensors.items() if not k.startswith(prefix)}
    assert len(kept) < len(tensors)
    _write(saved, kept, header, forge=True)
    with pytest.raises(ValueError, match=f"lacks its {what}"):
        read_checkpoint(saved)


@pytest.mark.parametrize("field", ["step", "meta", "param_groups", "parts", "sha256"])
def test_a_missing_header_field_is_named(saved, field):
    tensors, header = _parts(saved)
    _write(saved, tensors, {k: v for k, v in header.items() if k != field})
    with pytest.raises(ValueError, match=f"lacks its header field '{field}'"):
        read_checkpoint(saved)
