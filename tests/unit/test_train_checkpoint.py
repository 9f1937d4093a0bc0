"""Checkpoints: exact round trip, atomic writes, corrupt files rejected before anything is loaded."""

from __future__ import annotations

import pytest
import torch

from expattn.nn.lm import LM, LMConfig
from expattn.train.checkpoint import CheckpointError, read_checkpoint, restore, save_checkpoint
from expattn.train.optim import adamw

CFG = LMConfig(vocab_size=9, context=6, layers=2, heads=2, dim=8, carrier="gaussian_mixture")


def _trained(gen, cfg=CFG):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    model = LM(cfg)
    opt = adamw(model, 1e-2, 0.1)
    for _ in range(3):
        idx = torch.randint(0, 9, (2, 6), generator=gen)
        _, loss = model(idx, idx)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, opt


def _save(path, model, opt, gen):
    rng = {"data": gen.get_state(), "torch": torch.get_rng_state()}
    return save_checkpoint(path, 3, model, opt, rng, {"note": "test"})


def test_round_trip_restores_model_optimizer_and_rng(gen, tmp_path):
    model, opt = _trained(gen)
    path = _save(tmp_path / "ck.safetensors", model, opt, gen)
    ckpt = read_checkpoint(path)
    assert ckpt.step == 3 and ckpt.meta == {"note": "test"} and torch.equal(ckpt.rng["data"], gen.get_state())
    fresh = LM(CFG)
    fresh_opt = adamw(fresh, 1e-2, 0.1)
    restore(ckpt, fresh, fresh_opt)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    # the restored optimizer takes the same next step as the original one
    idx = torch.randint(0, 9, (2, 6), generator=gen)
    for m, o in ((model, opt), (fresh, fresh_opt)):
        _, loss = m(idx, idx)
        o.zero_grad()
        loss.backward()
        o.step()
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert fresh.head.weight is fresh.tok.weight  # weight tying survives the restore


def _assert_untouched(gen, tmp_path, data: bytes, match: str):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(data)
    with pytest.raises(CheckpointError, match=match):
        read_checkpoint(bad)


def test_corrupt_files_are_rejected(gen, tmp_path):
    model, opt = _trained(gen)
    data = _save(tmp_path / "ck.safetensors", model, opt, gen).read_bytes()
    _assert_untouched(gen, tmp_path, data[: len(data) // 2], "corrupt")
    _assert_untouched(gen, tmp_path, data[:5], "truncated")
    _assert_untouched(gen, tmp_path, b"\x00" * 8 + data[8:], "header")
    flipped = bytearray(data)
    position = len(data) - 1 - int(torch.randint(0, 200, (1,), generator=gen))  # a byte inside the tensors
    flipped[position] ^= 0x01
    _assert_untouched(gen, tmp_path, bytes(flipped), "SHA-256")
    with pytest.raises(CheckpointError, match="cannot be read"):
        read_checkpoint(tmp_path / "missing.safetensors")


def test_checkpoint_of_another_model_is_never_half_loaded(gen, tmp_path):
    model, opt = _trained(gen)
    ckpt = read_checkpoint(_save(tmp_path / "ck.safetensors", model, opt, gen))
    other = LM(LMConfig(vocab_size=9, context=6, layers=2, heads=2, dim=12, carrier="gaussian_mixture"))
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(CheckpointError, match="shape"):
        restore(ckpt, other, adamw(other, 1e-2, 0.1))
    for name, value in other.state_dict().items():
        assert torch.equal(value, before[name]), name
    deeper = LM(LMConfig(vocab_size=9, context=6, layers=3, heads=2, dim=8, carrier="gaussian_mixture"))
    with pytest.raises(CheckpointError, match="missing"):
        restore(ckpt, deeper, adamw(deeper, 1e-2, 0.1))


def test_save_is_atomic_when_writing_fails(gen, tmp_path, monkeypatch):
    model, opt = _trained(gen)
    path = _save(tmp_path / "ck.safetensors", model, opt, gen)
    original = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("expattn.train.checkpoint.os.fsync", broken)
    with pytest.raises(OSError, match="disk full"):
        _save(path, model, opt, gen)
    assert path.read_bytes() == original
    assert [p.name for p in tmp_path.iterdir()] == ["ck.safetensors"]  # no temporary file left behind
    with pytest.raises(TypeError, match="uint8"):
        save_checkpoint(tmp_path / "x.safetensors", 1, model, opt, {"data": torch.zeros(3)}, {})
