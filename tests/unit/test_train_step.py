"""The trainer's step: gradient accumulation, mixed precision, the sync-free loss tracker, compile."""

from __future__ import annotations

import json

import pytest
import torch
import torch._dynamo

from expattn.nn.lm import LM, LMConfig
from expattn.train.checkpoint import read_checkpoint
from expattn.train.loop import TrainConfig, train
from expattn.train.optim import adamw
from expattn.train.step import LossTracker, grad_scaler, optimizer_step

SMALL = LMConfig(vocab_size=11, context=12, layers=2, heads=2, dim=16)


def _updated(model_cfg, x, y, grad_accum, dtype=torch.float64, clip=1.0):
    torch.manual_seed(0)
    model = LM(model_cfg).to(dtype)
    before = [p.detach().clone() for p in model.parameters()]
    opt = adamw(model, 1e-2, 0.1, (0.9, 0.99))
    loss = optimizer_step(model, model, opt, x, y, grad_accum=grad_accum, grad_clip=clip)
    return loss, before, [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
def test_two_micro_batches_of_6_give_the_update_of_one_batch_of_12(gen, carrier):
    """Mean of two micro-batch means = mean of the batch: in float64 the update differs by summation order
    only (<= 1e-12 relative); the second half of the batch alone gives an update that differs far more."""
    cfg = LMConfig(**{**SMALL.__dict__, "carrier": carrier})
    x, y = torch.randint(0, 11, (2, 12, 12), generator=gen)
    loss1, before, one = _updated(cfg, x, y, 1)
    loss2, _, two = _updated(cfg, x, y, 2)
    _, _, half = _updated(cfg, x[6:], y[6:], 1)
    torch.testing.assert_close(loss2, loss1, rtol=1e-12, atol=0)
    for b, p1, p2 in zip(before, one, two, strict=True):
        step = (p1 - b).abs().amax()
        assert step > 1e-4  # the step moved every parameter (AdamW: about lr = 1e-2)
        assert (p2 - p1).abs().amax() <= 1e-12 * max(1.0, b.abs().amax().item())
    assert max((ph - p1).abs().amax().item() for p1, ph in zip(one, half, strict=True)) > 1e-4


def test_accumulation_must_divide_the_batch(gen):
    x, y = torch.randint(0, 11, (2, 6, 12), generator=gen)
    model = LM(SMALL)
    with pytest.raises(ValueError, match="grad_accum=4 must divide"):
        optimizer_step(model, model, adamw(model, 1e-3, 0.0, (0.9, 0.99)), x, y, grad_accum=4)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_step_is_close_to_float32(gen, dtype):
    """Autocast on CPU: the loss agrees with float32 to the half format's precision (bfloat16 has 8 bits of
    mantissa: relative 2^-8 ~ 4e-3 per rounding, a few roundings deep -> 3e-2; float16 has 11 bits -> 5e-3),
    and is not bitwise float32's (so autocast did run)."""
    x, y = torch.randint(0, 11, (2, 8, 12), generator=gen)
    torch.manual_seed(0)
    ref_model = LM(SMALL)
    ref = optimizer_step(ref_model, ref_model, adamw(ref_model, 1e-3, 0.0, (0.9, 0.99)), x, y)
    torch.manual_seed(0)
    model = LM(SMALL)
    scaler = grad_scaler(x.device, dtype)
    assert (scaler is not None) == (dtype == "float16")
    loss = optimizer_step(model, model, adamw(model, 1e-3, 0.0, (0.9, 0.99)), x, y, dtype=dtype, scaler=scaler)
    assert loss.dtype == torch.float32
    tol = 3e-2 if dtype == "bfloat16" else 5e-3
    assert 0 < abs(loss.item() - ref.item()) <= tol * ref.item()
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())


def test_loss_tracker_reports_the_first_non_finite_step():
    tracker = LossTracker(torch.device("cpu"))
    tracker.update(1, torch.tensor(2.5))
    assert tracker.read() == 2.5
    tracker.update(2, torch.tensor(float("nan")))
    tracker.update(3, torch.tensor(1.0))
    tracker.update(4, torch.tensor(float("inf")))
    with pytest.raises(ValueError, match="diverged at step 2"):
        tracker.read()


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "sphere", "identity", "whitening"])
@pytest.mark.parametrize("carrier", ["empirical", "gaussian_mixture", "mixture_lower_bound"])
def test_lm_compiles_without_graph_breaks(gen, carrier, norm):
    """torch._dynamo traces the whole training forward (loss included) as one graph."""
    model = LM(LMConfig(**{**SMALL.__dict__, "carrier": carrier, "norm": norm}))
    x, y = torch.randint(0, 11, (2, 4, 12), generator=gen)
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(x, y)
    assert explained.graph_break_count == 0, [b.reason for b in explained.break_reasons]
    assert explained.graph_count == 1


def test_compiled_training_matches_eager(gen, tmp_path):
    """fullgraph compile (eager backend: the traced graph, run by the eager kernels) gives the same losses."""
    text = tmp_path / "t.txt"
    text.write_text("".join("abcdefgh \n"[i] for i in torch.randint(0, 10, (4000,), generator=gen).tolist()))
    base = dict(model=LMConfig(context=12, layers=1, heads=2, dim=16), corpus=str(text), batch=4, iters=4,
                eval_every=2, eval_batches=2, ckpt_every=4, device="cpu", progress=False)
    eager = train(TrainConfig(out=tmp_path / "eager", **base)).metrics
    torch._dynamo.reset()
    compiled = train(TrainConfig(out=tmp_path / "compiled", compile=True, **base)).metrics
    for a, b in zip(eager, compiled, strict=True):
        for key in ("train_loss", "val_loss", "step_loss"):
            assert abs(a[key] - b[key]) <= 1e-5 * a[key]  # float32 rounding of re-ordered kernels
    stored = json.loads((tmp_path / "compiled" / "config.json").read_text())["train"]
    assert stored["compile"] is True


def test_float16_checkpoint_keeps_the_grad_scaler(gen, tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("".join("abcdefgh \n"[i] for i in torch.randint(0, 10, (4000,), generator=gen).tolist()))
    cfg = TrainConfig(out=tmp_path / "run", model=LMConfig(context=12, layers=1, heads=2, dim=16), corpus=str(text),
                      batch=4, iters=2, eval_every=2, eval_batches=1, ckpt_every=2, device="cpu", progress=False,
                      dtype="float16")
    train(cfg)
    state = read_checkpoint(tmp_path / "run" / "checkpoint.safetensors").meta["grad_scaler"]
    assert state["scale"] > 0 and state["_growth_tracker"] == 2  # two finite steps since the start


@pytest.mark.parametrize(("field", "value", "fragment"), [
    ("dtype", "float64", "dtype must be one of"), ("grad_accum", 0, "grad_accum must be an integer >= 1"),
    ("grad_accum", 5, "grad_accum must divide batch=12"),
])
def test_bad_precision_and_accumulation_options(tmp_path, field, value, fragment):
    with pytest.raises(ValueError, match=fragment):
        TrainConfig(out=tmp_path, **{field: value})
