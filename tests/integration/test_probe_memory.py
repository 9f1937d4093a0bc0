"""The probe's memory: the footprint's peak against a tiny model's measured peak, passes under a budget, results
that hold only host tensors, and the API's up-front checks of ``progress`` and ``input_ids``.

The peak is measured with torch's profiler (``profile_memory``): every CPU allocation and free of tensor storage,
in order; the peak is the largest running sum over the probe call (what it allocates beyond what was held
before: the model's weights are not counted, as ``Footprint.peak`` does not count them).
"""

from __future__ import annotations

import gc
import os
import sys
import types
import warnings
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parents[1]))
from elsewhere import ELSEWHERE, elsewhere, to_elsewhere
from tiny_models import build_tiny

import expattn
from expattn.probes.footprint import footprint

SEQUENCES, SEQ_LEN, BATCH, REPLICATES, DETAIL = 24, 32, 8, 20, 4


def measured_peak(run) -> tuple[object, int]:
    """``run()`` and the peak of the CPU tensor storage it allocated beyond what was held before (bytes)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = run()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    running = peak = 0
    for _, change in events:
        running += change
        peak = max(peak, running)
    return out, peak


def _ids(n: int = SEQUENCES) -> torch.Tensor:
    return torch.randint(1000, 2000, (n, SEQ_LEN), generator=torch.Generator().manual_seed(0))


def _llama(width: int):
    return build_tiny("llama", hidden_size=width, intermediate_size=2 * width, num_attention_heads=4,
                      num_key_value_heads=2)


@pytest.mark.slow
@pytest.mark.parametrize("hypotheses", [("E6",), ("E3", "E4")])
def test_footprint_peak_is_within_ten_percent_of_the_measured_peak(hypotheses):
    """A width-128 Llama, where the statistics, the analyses' transients and the batch's activations are all of
    the same order (so a part left out moves the estimate by more than 10%: leaving out the analyses, as the
    statistics-only footprint did, gives 0.3-0.6 of the peak). 10% two-sided: the activations' per-token
    counts (``FORWARD_*``, ``TAPS``) and the transients' coefficients are whole numbers read off such runs."""
    model = _llama(128)
    kw = {"input_ids": _ids(), "hypotheses": hypotheses, "replicates": REPLICATES, "batch_size": BATCH,
          "detail_sequences": DETAIL}
    threads = torch.get_num_threads()
    try:  # the synchronous loop, which the footprint counts: no core left for the update worker (overlap.py)
        torch.set_num_threads(max(os.cpu_count() or 1, threads))
        _, peak = measured_peak(lambda: expattn.probe(model, **kw))
    finally:
        torch.set_num_threads(threads)
    need = footprint(128, 2, 4, hypotheses, kv_heads=2, intermediate=256, batch_size=BATCH,
                     tokens=SEQUENCES * SEQ_LEN, seq_len=SEQ_LEN, detail_sequences=DETAIL, replicates=REPLICATES)
    assert 0.9 < need.peak() / peak < 1.1, (need, peak)
    statistics_only = sum(need.statistics.values())
    assert not 0.9 < statistics_only / peak < 1.1, (statistics_only, peak)  # the control: the old count fails


def _records(res) -> dict:
    return {r.id: (r.verdict, r.metrics, r.details, r.notes, [c.verdict for c in r.controls]) for r in res.records}


@pytest.mark.slow
def test_a_budget_that_holds_not_all_gives_passes_with_the_records_of_one(capsys):
    model = _llama(32)
    kw = {"input_ids": _ids(), "hypotheses": ("E1", "E3", "E6", "E8"), "replicates": REPLICATES,
          "batch_size": BATCH, "detail_sequences": DETAIL}
    one = expattn.probe(model, **kw)
    need = footprint(32, 2, 4, kw["hypotheses"], kv_heads=2, intermediate=64, batch_size=BATCH,
                     tokens=SEQUENCES * SEQ_LEN, seq_len=SEQ_LEN, detail_sequences=DETAIL, replicates=REPLICATES)
    budget = max(need.peak((h,)) for h in kw["hypotheses"]) + 16 * SEQUENCES * SEQ_LEN  # the largest alone fits
    assert budget < need.peak()  # not all at once
    capsys.readouterr()
    split = expattn.probe(model, memory_budget=budget, **kw)
    err = capsys.readouterr().err
    fed = sorted(h for group in split.outcome.passes for h in group)
    assert len(split.outcome.passes) > 1 and fed == sorted(kw["hypotheses"])
    assert f"pass 1 of {len(split.outcome.passes)} over the same {SEQUENCES * SEQ_LEN:,} tokens" in err, err
    assert one.outcome.passes == [list(kw["hypotheses"])]
    assert _records(split) == _records(one)
    from expattn import memory
    from expattn.probes import runner

    with pytest.MonkeyPatch.context() as mp:  # the line's peak is its largest pass's, not all four at once
        mp.setattr(memory, "held_bytes", lambda device: 0)
        mp.setattr(runner, "SAY_PEAK_FROM", 0)
        tight: list[int] = []
        mp.setattr(runner, "map_when_tight", tight.append)  # told the peak it says
        expattn.probe(model, memory_budget=budget, **kw)
        said = capsys.readouterr().err
    largest = max(need.peak(tuple(group)) for group in split.outcome.passes)
    assert tight == [largest]
    assert memory.readable(largest) != memory.readable(need.peak())
    assert (f"memory: estimated peak {memory.readable(largest)} on cpu (0.0 MiB held now, model "
            f"included, + {memory.readable(largest)} for the probe in its largest of {len(split.outcome.passes)} "
            f"passes, {memory.readable(need.peak())} all at once;") in said, said
    with pytest.raises(ValueError, match=r"for E3 alone .* within the memory budget.*--statistics float32"):
        expattn.probe(model, memory_budget=need.peak(("E6",)) // 2, **kw)
    with pytest.raises(ValueError, match="memory_budget must be a whole number of bytes"):
        expattn.probe(model, memory_budget="lots", **kw)


def test_between_passes_the_heap_goes_back_once_the_last_passs_statistics_are_gone(monkeypatch):
    """A bfloat16 Qwen2.5 1.5B twin's second pass ran 3 GiB above its estimate on top of the first pass's freed
    statistics, which glibc kept (benchmarks/RESULTS.md): the heap is released between passes, after the estimators
    of the pass before are gone (their husks in the drawings hold no statistics)."""
    from expattn.probes import runner
    from expattn.probes.hypotheses.base import Estimator

    model = _llama(32)
    kw = {"input_ids": _ids(), "hypotheses": ("E1", "E3", "E6", "E8"), "replicates": REPLICATES,
          "batch_size": BATCH, "detail_sequences": DETAIL}
    need = footprint(32, 2, 4, kw["hypotheses"], kv_heads=2, intermediate=64, batch_size=BATCH,
                     tokens=SEQUENCES * SEQ_LEN, seq_len=SEQ_LEN, detail_sequences=DETAIL, replicates=REPLICATES)
    budget = max(need.peak((h,)) for h in kw["hypotheses"]) + 16 * SEQUENCES * SEQ_LEN
    alive: list[set[str]] = []

    def estimators() -> list[Estimator]:
        gc.collect()
        with warnings.catch_warnings():  # isinstance on every object reads torch's deprecated module attributes
            warnings.simplefilter("ignore", FutureWarning)
            return [o for o in gc.get_objects() if isinstance(o, Estimator)]

    before = estimators()  # other tests' estimators, held here so that no new one takes their id
    others = {id(o) for o in before}

    def release() -> None:  # this probe's estimators still holding statistics when the heap is released
        alive.append({o.claim for o in estimators() if id(o) not in others
                      and any(not isinstance(v, (bool, int, float, str, type(None)))
                              for k, v in vars(o).items() if k != "ctx")})

    monkeypatch.setattr(runner, "release_heap", release)
    split = expattn.probe(model, memory_budget=budget, **kw)
    assert len(alive) == len(split.outcome.passes) - 1 >= 1
    assert alive == [set()] * len(alive)


def device_tensors(root: object, device: torch.device) -> list[str]:
    """Paths of the tensors on ``device`` reachable from ``root`` (``gc.get_referents``, functions' closures and
    defaults; not classes, modules or functions' globals, which reach everything)."""
    found, seen, todo = [], set(), [(root, "result")]
    skip = (type, types.ModuleType, types.BuiltinFunctionType)
    while todo:
        obj, path = todo.pop()
        if id(obj) in seen or isinstance(obj, skip):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            if obj.device.type == device.type:
                found.append(f"{path}: {tuple(obj.shape)}")
            continue
        if isinstance(obj, types.FunctionType):
            inner = [c.cell_contents for c in obj.__closure__ or () if c.cell_contents is not None]
            todo += [(x, f"{path}.<closure>") for x in inner + list(obj.__defaults__ or ())]
            continue
        todo += [(x, f"{path}>{type(x).__name__}") for x in gc.get_referents(obj)]
    return found


@pytest.mark.slow
def test_results_hold_no_tensor_on_the_probe_device(tmp_path):
    """After ``probe`` returns, nothing reachable from its result lives on the probe's device (the fake device
    of ``tests/elsewhere.py``): the records and figures' numbers are on the host; the estimators' statistics and
    the model's weights are not kept. The result still draws its figures."""
    model = to_elsewhere(_llama(32))
    with elsewhere():
        res = expattn.probe(model, input_ids=_ids(8), hypotheses=("E1", "E3", "E4", "E6"), replicates=REPLICATES,
                            batch_size=4, detail_sequences=DETAIL)
    assert {r.verdict for r in res.records} != {"error"}
    assert device_tensors(res, ELSEWHERE) == []
    assert device_tensors({"model": model}, ELSEWHERE)  # the control: the walk finds the model's weights
    res.save(tmp_path / "out")
    assert all(r.plots for r in res.records if r.verdict != "error"), [(r.id, r.plots) for r in res.records]


def test_progress_that_cannot_be_called_is_refused_up_front():
    with pytest.raises(TypeError, match=r"progress must be callable .* got int"):
        expattn.probe(_llama(32), input_ids=_ids(2), hypotheses="E1", progress=5)


def test_empty_input_ids_are_named():
    with pytest.raises(ValueError, match=r"input_ids must hold at least one sequence .* got shape \(0, 32\)"):
        expattn.probe(_llama(32), input_ids=_ids(0), hypotheses="E1")


def test_the_memory_line_follows_the_model_and_settings_not_the_process(capsys, monkeypatch):
    """The estimate's line appears from ``SAY_PEAK_FROM`` of weights plus footprint on, whatever the process held
    before (a long test session holds gigabytes; a tiny model's run stays silent there too); the control: with the
    threshold at zero the same run prints it."""
    from expattn import memory
    from expattn.probes import runner

    model = _llama(32)
    kw = {"input_ids": _ids(2), "hypotheses": ("E1",), "replicates": 2, "batch_size": 2, "detail_sequences": 1}
    monkeypatch.setattr(memory, "held_bytes", lambda device: 64 * memory.GIB)
    capsys.readouterr()
    expattn.probe(model, **kw)
    assert "memory:" not in capsys.readouterr().err
    monkeypatch.setattr(runner, "SAY_PEAK_FROM", 0)
    expattn.probe(model, **kw)
    said = capsys.readouterr().err
    assert "memory: estimated peak 64.0 GiB on cpu (64.0 GiB held now" in said and "twin" not in said
    expattn.probe(model, twin=True, twin_inits=1, **kw)  # the model's line counts a twin's weights; the twin's not
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("memory:")]
    weights = sum(p.numel() * p.element_size() for p in (*model.parameters(), *model.buffers()))
    assert len(said) == 2 and f", + {memory.readable(weights)} for a random-init twin;" in said[0], said
    assert "twin" not in said[1]
