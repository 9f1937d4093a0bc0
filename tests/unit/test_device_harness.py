"""Device bugs fail here, on the CPU, in every CI run (DESIGN.md: device-agnostic code).

``tests/elsewhere.py`` gives a second device with real numbers: ``Elsewhere`` tensors report ``meta``, refuse
device mixing (even the ``meta @ cpu`` product that plain ``meta`` lets through), ``.numpy()`` and, strictly, any
read to the host; ``.cpu()`` gives the numbers back. The whole probe (every hypothesis: update, analysis, record),
the modules (``ExpFamAttention`` with each carrier, ``Hopfield``) and a training step run on it. Which test caught
which bug of main at f17ea7e (measured on an H200, shared/measurements/gpu-h200-2026-11-26.md):

- ``test_each_hypothesis_on_another_device`` (one hypothesis at a time) and ``test_probe_on_another_device``
  (all, compared with the CPU's records): E3's update (directions on the CPU), E5's update (``.numpy()``), E6's update
  (noise on the CPU), the analyses of E1, E2, E4, E7, E8, E9 (``.numpy()``), and the generic reading's check of
  the pre-attention norm (a CPU input to the model's norm: every architecture read from its module tree);
- ``test_hot_paths_never_read_to_host``: ``core.validate.sum_is_finite``'s ``.item()`` on every call;
- ``test_place_takes_cuda_without_an_index``: ``place`` calling ``torch.cuda.set_device(torch.device("cuda"))``.
"""

from __future__ import annotations

import pytest
import torch
from elsewhere import SYNCS, DeviceMix, HostRead, elsewhere, to_elsewhere
from tiny_models import build_tiny
from torch.utils._python_dispatch import TorchDispatchMode

from expattn.core import empirical as empirical_module
from expattn.core import validate
from expattn.core.empirical import Empirical
from expattn.core.validate import check_output
from expattn.nn.attention import ExpFamAttention, ExpFamAttentionConfig
from expattn.nn.hopfield import Hopfield, HopfieldConfig
from expattn.nn.hopfield_layers import HopfieldLayer, HopfieldPooling
from expattn.nn.lm import LM, LMConfig
from expattn.nn.norms import NormConfig, build_norm, norm_names
from expattn.probes import runner
from expattn.probes.hypotheses import hypotheses
from expattn.probes.models import subject as subject_module
from expattn.probes.models.subject import parse_device, place, subject_from_model
from expattn.probes.runner import ProbeConfig, probe_subject
from expattn.probes.statistics.stats import BootstrapMeans, Moments
from expattn.train.optim import adamw
from expattn.train.step import optimizer_step

CARRIERS = ["empirical", "gaussian_mixture", "mixture_lower_bound"]


def test_the_harness_refuses_what_a_gpu_refuses():
    """The harness itself: mixing (a matmul with a CPU matrix), ``.numpy()`` and, strictly, ``.item()`` and
    ``.tolist()`` raise; 0-dim CPU scalars and CPU index tensors pass as on CUDA; ``.cpu()`` gives the numbers."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(3, 4, generator=gen), torch.randn(4, 2, generator=gen)
    x = to_elsewhere(a)
    with elsewhere():
        assert torch.equal((x @ to_elsewhere(b)).cpu(), a @ b)
        assert torch.equal((x * torch.tensor(2.0)).cpu(), a * 2)
        assert torch.equal(x[torch.tensor([2, 0])].cpu(), a[[2, 0]])
        assert torch.zeros(2, device=x.device).device == x.device
        with pytest.raises(DeviceMix):
            x @ b
        with pytest.raises(TypeError, match="numpy"):
            x.numpy()
        assert x.sum().item() == a.sum().item()
    with elsewhere(strict=True):
        for read in (lambda: x.sum().item(), lambda: x.tolist(), lambda: bool(x.sum() > 0)):
            with pytest.raises(HostRead):
                read()


def _no_crash(records) -> None:
    """No record is a crash: ``error`` (the lead's verdict) or ``skipped`` because the analysis raised."""
    crashed = [(r.id, r.notes) for r in records if r.verdict == "error" or (r.verdict == "skipped"
                                                                          and "raised" in r.notes)]
    assert not crashed, crashed


def _probe(model_type: str, on_device: bool, hypotheses: tuple[str, ...] = hypotheses()):
    model = build_tiny(model_type)
    ids = torch.randint(0, 1000, (8, 32), generator=torch.Generator().manual_seed(0))
    config = ProbeConfig(model=model_type, tokens=ids.numel(), seq_len=32, batch_size=4, replicates=20,
                         detail_sequences=4, hypotheses=hypotheses)
    if not on_device:
        return probe_subject(subject_from_model(model, None), config, None, input_ids=ids, speedups=False)
    to_elsewhere(model)
    with elsewhere():
        return probe_subject(subject_from_model(model, None), config, None, input_ids=ids, speedups=False)


@pytest.mark.parametrize("hypothesis", hypotheses())
def test_each_hypothesis_on_another_device(hypothesis):
    """Each hypothesis alone (so that one bug does not hide the next), a Llama on another device: its update and
    its analysis run, and its record is not a crash."""
    records = _probe("llama", on_device=True, hypotheses=(hypothesis,)).records
    assert [r.id for r in records] == [hypothesis]
    _no_crash(records)


# where an update may still read to the host, and why (boolean masks: their size is data): E3's and E4's masked
# copies when a massive token is left out, E3's count of hits (massive activations), E6's folds, E7's few
# detail sequences; nonzero() and boolean indexing synchronise on CUDA without passing through .item()
HOST_READS = {"probes/hypotheses/e3_gaussianity.py:kept_moments", "probes/hypotheses/e6_mlp.py:update",
              "probes/hypotheses/e7_collapse.py:update"}


def test_probe_updates_read_to_host_only_where_known(monkeypatch):
    """A census of the host reads (``.item()``, ``.tolist()``, ``bool()``) of every hypothesis's update on another
    device: none but the known ones (``HOST_READS``); E1, E2, E5, E8 and E9 none at all."""
    places: dict[str, list[str]] = {}
    for cls in runner.ESTIMATORS:
        def update(self, i, tensors, batch, _update=cls.update):
            with elsewhere(strict=places.setdefault(self.claim, [])):
                _update(self, i, tensors, batch)
        monkeypatch.setattr(cls, "update", update)
    _no_crash(_probe("llama", on_device=True).records)
    assert set(places) == set(hypotheses())
    assert not any(places[h] for h in ("E1", "E2", "E5", "E8", "E9")), places
    assert {p for found in places.values() for p in found} <= HOST_READS, places


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])  # a hand-written adapter; the generic reading
def test_probe_on_another_device(model_type):
    """Every hypothesis (update, analysis, record) with the model and its statistics on another device: nothing
    raises, every statistic stays there (mixing raises), and the records are the CPU's: the same verdicts, and
    metrics equal to float32 rounding (the CPU takes numpy's BLAS and selection where a device takes torch's, and
    the model its own kernels: E5's errors, themselves of the order of float32 rounding, agree to 1e-5 absolute,
    and its errors in units of their rounding bounds to those bounds)."""
    there = _probe(model_type, on_device=True)
    _no_crash(there.records)
    assert {r.id for r in there.records} == set(hypotheses())
    here = _probe(model_type, on_device=False)
    for mine, theirs in zip(there.records, here.records, strict=True):
        assert (mine.id, mine.verdict) == (theirs.id, theirs.verdict)
        for key, value in theirs.metrics.items():
            if not isinstance(value, float):
                continue
            # E5's own rounding in units of its bounds (the identity's, the reconstruction's): each side's kernels
            # round differently, up to the bound itself; that both stay within it is the verdict, compared above
            bounded = key in ("max_error_over_bound", "max_reconstruction_over_bound")
            close = {"abs": 1.0} if bounded else {"rel": 1e-4, "abs": 1e-5}
            assert mine.metrics[key] == pytest.approx(value, nan_ok=True, **close), (mine.id, key)


@pytest.mark.parametrize("carrier", CARRIERS)
def test_hot_paths_never_read_to_host(carrier):
    """As ``tests/cuda``'s ``test_cuda_hot_paths_never_synchronise``, on the CPU: attention (padded; causal with
    weights) forward and backward, a training step of the LM and a Hopfield update read nothing to the host
    (the finiteness checks included), and everything stays on the device."""
    gen = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    model = to_elsewhere(LM(LMConfig(vocab_size=13, context=16, layers=2, heads=2, dim=32, carrier=carrier)))
    attn = to_elsewhere(ExpFamAttention(ExpFamAttentionConfig(embed_dim=32, num_heads=4, num_kv_heads=2,
                                                              carrier=carrier)))
    hopfield = to_elsewhere(Hopfield(HopfieldConfig(input_size=32)))
    x, y = (to_elsewhere(t) for t in torch.randint(0, 13, (2, 4, 16), generator=gen))
    h = to_elsewhere(torch.randn(2, 16, 32, generator=gen)).requires_grad_(True)
    pad = torch.ones(2, 16, dtype=torch.bool)
    pad[1, 9:] = False
    pad = to_elsewhere(pad)
    with elsewhere():
        opt = adamw(model, 1e-3, 0.0, (0.9, 0.99))
    with elsewhere(strict=True):
        optimizer_step(model, model, opt, x, y, dtype="float32", grad_clip=1.0)  # autocast has no meta
        attn(h, key_padding_mask=pad).sum().backward()
        attn(h, is_causal=True, need_weights=True).sum().backward()
        hopfield(h, h.detach()).sum().backward()
    assert all(p.grad is not None and p.grad.device.type == "meta" for p in attn.parameters())


def test_a_non_finite_output_on_a_device_still_raises():
    """The device check queues an assertion instead of reading the value: still an exception (on CUDA at the
    next synchronisation; here at once), without a read to the host."""
    bad = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))
    bad[2, 3] = float("nan")
    with elsewhere(strict=True), pytest.raises(RuntimeError, match="not finite"):
        check_output("out", to_elsewhere(bad), "overflow")
    with elsewhere(strict=True):
        check_output("out", to_elsewhere(bad.nan_to_num()), "overflow")


def test_place_takes_cuda_without_an_index(monkeypatch):
    """``expattn probe --device cuda`` and ``expattn.probe(..., device="cuda")``: ``place`` must not hand the
    unindexed device to ``torch.cuda.set_device`` (which raises "Expected a torch.device with a specified index");
    ``cuda:1`` is set. CUDA's functions are stood in for, so this runs without a GPU."""
    calls: list[torch.device] = []

    def set_device(device) -> None:
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            raise ValueError("Expected a torch.device with a specified index or an integer, but got:cuda")
        calls.append(device)

    class Model(torch.nn.Module):
        def to(self, *args, **kwargs):  # no CUDA here: moving is what torch does, not under test
            self.moved = args
            return self

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", set_device)
    monkeypatch.setattr(subject_module.torch.cuda, "set_device", set_device)
    model = place(Model(), parse_device("cuda"), None)
    assert model.moved == (torch.device("cuda"),)
    assert all(d.index is not None for d in calls)
    place(Model(), parse_device("cuda:1"), None)
    assert calls[-1] == torch.device("cuda", 1)


class _Reads(TorchDispatchMode):
    """Counts the ops that read a value to the host (a synchronisation on an accelerator)."""

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in SYNCS:
            self.reads.append(func)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_empirical_mean_on_an_accelerator_reads_nothing_back(monkeypatch, dtype):
    """``Empirical(k).mean(q)`` forward and backward as on an accelerator (``on_host`` False): the overflow bound and
    the finiteness of q and k are asserted on the device, with no read to the host (on an H200 the two reads made it
    1.29x SDPA at (8, 16, 2048, 64)); the numbers are the CPU path's; NaN and a bound beyond float32's range raise."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 16, 8, generator=gen).to(dtype) for _ in range(2))
    expected = Empirical(k).mean(q)
    monkeypatch.setattr(empirical_module, "on_host", lambda value: False)
    qg = q.clone().requires_grad_(True)
    with _Reads() as mode:
        out = Empirical(k).mean(qg)
        out.sum().backward()
    assert mode.reads == [] and torch.equal(out.detach(), expected) and qg.grad is not None
    bad = q.clone()
    bad[0, 1, 2, 3] = float("nan")
    huge = torch.full_like(q, 1e19)  # ||q||_F ||k||_F = 1e19 * 19.6 * ||k||_F > float32's largest / 4
    for eta in (bad, huge):
        with pytest.raises(RuntimeError, match="Empirical: eta, atoms or log_weights"):
            Empirical(k).mean(eta)
    with pytest.raises(RuntimeError, match="Empirical"):
        Empirical(torch.full_like(k, float("inf"))).mean(q)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_device_path_of_the_finiteness_checks(monkeypatch, dtype):
    """``require_finite``, ``check_output`` and ``check_output_of`` as on an accelerator (``on_host`` False): the
    asynchronous assertion raises for NaN and infinity, passes finite values whose sum overflows (it takes the
    largest magnitude, not the sum) and empty tensors."""
    monkeypatch.setattr(validate, "on_host", lambda value: False)
    big = torch.full((4, 8), torch.finfo(dtype).max / 2, dtype=dtype)
    for value in (big, torch.randn(3, 5).to(dtype), torch.empty(0, 4, dtype=dtype)):
        validate.require_finite("x", value)
        validate.check_output("out", value, "overflow")
        validate.check_output_of("out", value, "overflow", {"x": value})
    for bad in (float("nan"), float("inf"), float("-inf")):
        x = torch.randn(3, 5).to(dtype)
        x[1, 2] = bad
        for check, extra in ((validate.require_finite, ()), (validate.check_output, ("overflow",)),
                             (validate.check_output_of, ("overflow", {"x": x}))):
            with pytest.raises(RuntimeError, match="finite"):
                check("x", x, *extra)


def test_statistics_check_finiteness_without_a_host_read_per_batch():
    """``Moments`` and ``BootstrapMeans`` on a device: updates read nothing to the host; a NaN fed in still raises
    the CPU's ValueError, when the statistics are read out."""
    gen = torch.Generator().manual_seed(0)
    x, values, weights = torch.randn(40, 6, generator=gen), torch.randn(5, 3, generator=gen), torch.ones(5, 4)
    x[7, 2] = values[1, 1] = float("nan")
    moments, boot = Moments(6, True, torch.randn(6, 2, generator=gen)), BootstrapMeans(3, 4)
    with elsewhere(strict=True):
        moments.update(to_elsewhere(x))
        boot.update(to_elsewhere(values), weights)
    with elsewhere(), pytest.raises(ValueError, match="NaN"):
        _ = moments.covariance_
    with elsewhere(), pytest.raises(ValueError, match="NaN"):
        moments.excess_kurtosis_()
    with elsewhere(), pytest.raises(ValueError, match="NaN"):
        boot.interval(lambda m: m)


def _layers():
    yield "hopfield_layer", lambda: HopfieldLayer(HopfieldConfig(input_size=8), quantity=10)
    yield "hopfield_pooling", lambda: HopfieldPooling(HopfieldConfig(input_size=8), num_queries=2)
    for name in norm_names():
        if name != "whitening":  # its eigendecomposition's backward does not run on the harness (tests/cuda has it)
            yield f"norm_{name}", lambda name=name: build_norm(name, NormConfig(8))


LAYERS = dict(_layers())


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_layers_and_norms_read_nothing_to_host(name):
    """Hopfield layers and the normalizations, forward and backward on another device: no device mixing, no read
    to the host, the gradient there."""
    torch.manual_seed(0)
    module = to_elsewhere(LAYERS[name]())
    x = to_elsewhere(torch.randn(2, 20, 8, generator=torch.Generator().manual_seed(1))).requires_grad_(True)
    with elsewhere(strict=True):
        module(x).sum().backward()
    assert x.grad is not None and x.grad.device == x.device
