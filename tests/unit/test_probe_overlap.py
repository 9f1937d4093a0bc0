"""Estimator updates in a worker thread and analyses two at a time: same order, errors handed back, and bitwise
the same probe."""

from __future__ import annotations

import math
import threading

import numpy as np
import pytest
import torch

from expattn.nn.export import export_model
from expattn.nn.lm import LM, LMConfig
from expattn.probes.overlap import UpdateWorker, measure_in_parallel
from expattn.probes.runner import ProbeConfig, run_probe

VOCAB = "\n abcdefgh"


def test_jobs_run_in_order_in_another_thread_without_grad():
    seen = []

    def job(k):
        seen.append((k, threading.get_ident(), torch.is_grad_enabled()))

    with UpdateWorker(depth=2) as worker:
        for k in range(50):
            worker.submit(job, k)
        worker.drain()
    assert [k for k, _, _ in seen] == list(range(50))
    assert {t for _, t, _ in seen} != {threading.get_ident()} and not any(g for _, _, g in seen)
    assert worker.busy_seconds >= 0 and worker.cpu_seconds >= 0


def test_submit_waits_while_depth_jobs_are_pending():
    release, started = threading.Event(), threading.Event()

    def slow():
        started.set()
        release.wait()

    with UpdateWorker(depth=1) as worker:
        worker.submit(slow)
        started.wait()
        worker.submit(lambda: None)  # fills the queue of depth 1 while `slow` runs
        blocked = threading.Thread(target=worker.submit, args=(lambda: None,))
        blocked.start()
        blocked.join(timeout=0.2)
        assert blocked.is_alive()  # a third job must wait: at most one queued behind the running one
        release.set()
        blocked.join(timeout=5)
        assert not blocked.is_alive()
        worker.drain()


def test_a_failing_job_is_raised_in_the_caller_and_later_jobs_are_dropped():
    ran = []

    def fail():
        raise KeyError("attn.heads")

    with UpdateWorker() as worker:
        worker.submit(fail)
        worker.submit(ran.append, 1)
        with pytest.raises(KeyError, match=r"attn\.heads"):
            worker.drain()
    assert ran == []
    with pytest.raises(ValueError, match="depth must be an integer >= 1, got 0"):
        UpdateWorker(depth=0)
    with pytest.raises(RuntimeError, match="outside its `with` block"):
        UpdateWorker().submit(print)


def test_parallel_analyses_keep_each_outcome_and_exception_with_its_estimator():
    class Est:
        def __init__(self, claim, value):
            self.claim, self.value = claim, value

        def measure(self):
            if isinstance(self.value, Exception):
                raise self.value
            assert not torch.is_grad_enabled()
            return (self.value, threading.current_thread().name)

    boom = RuntimeError("singular")
    out = measure_in_parallel([Est("E1", 1), Est("E2", boom), Est("E3", 3)])
    assert list(out) == ["E1", "E2", "E3"]
    assert out["E1"][0][0] == 1 and out["E3"][0][0] == 3 and out["E2"][0] is boom
    assert out["E1"][0][1].startswith("expattn-probe-analyses") and all(s >= 0 for _, s in out.values())


def _same(x, y) -> bool:
    if isinstance(x, torch.Tensor):
        return isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, np.ndarray):
        return np.array_equal(x, y, equal_nan=True)
    if isinstance(x, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, list | tuple):
        return len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y, strict=True))
    if isinstance(x, float) and math.isnan(x):
        return isinstance(y, float) and math.isnan(y)
    if hasattr(x, "__dict__"):  # a statistics object (moments, sums): compare its fields
        return type(x) is type(y) and _same(vars(x), vars(y))
    return x == y


def test_overlapped_probe_is_bitwise_the_synchronous_one(gen, tmp_path, monkeypatch):
    """Every fitted statistic of every estimator and every metric: equal, not close."""
    (tmp_path / "t.txt").write_text("".join(VOCAB[i] for i in torch.randint(0, 10, (4000,), generator=gen).tolist()))
    model = LM(LMConfig(vocab_size=len(VOCAB), context=16, layers=2, heads=2, dim=16)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=gen))
    folder = export_model(model, VOCAB, tmp_path / "model")
    config = ProbeConfig(model=str(folder), text=str(tmp_path / "t.txt"), tokens=16 * 40, seq_len=16, batch_size=8,
                         replicates=10, detail_sequences=2)
    from expattn.probes import runner

    fitted: list[list] = []
    records = runner.records
    monkeypatch.setattr(runner, "records", lambda estimators, *a, **k: (fitted.append(estimators), records(
        estimators, *a, **k))[1])  # the estimators as they reach their analysis (the results keep host numbers)
    sync, overlapped = run_probe(config, None, speedups=False), run_probe(config, None, speedups=True)
    assert [e.claim for e in fitted[0]] == [e.claim for e in fitted[1]] and fitted[0]
    for a, b in zip(*fitted, strict=True):
        fitted = {k: v for k, v in vars(a).items() if k.endswith("_")}
        assert fitted, a.claim
        for name, value in fitted.items():
            assert _same(value, getattr(b, name)), (a.claim, name)
    for a, b in zip(sync.records, overlapped.records, strict=True):
        assert a.verdict == b.verdict and _same(a.metrics, b.metrics), a.id
        assert _same(a.details, b.details) and a.controls == b.controls and a.notes == b.notes, a.id


class _Traced:
    """An estimator stand-in whose analysis and record leave a trace in ``log``."""

    def __init__(self, claim, log):
        self.claim, self.log = claim, log

    def measure(self):
        self.log.append(f"measure {self.claim}")
        return self.claim

    def result(self, out_dir, measured):
        from expattn.results.record import Record
        return Record(self.claim, "empirical", "inconclusive")


def test_the_heap_goes_back_after_each_analysis_in_turn_and_two_at_a_time(monkeypatch):
    """Each analysis's transient is given back (``trim_heap``) before the next one allocates its own, so an
    analysis's peak does not sit on the heap the ones before it left (benchmarks/RESULTS.md: the resident size
    crept up analysis after analysis)."""
    from expattn.probes import analyses, overlap

    log = []
    monkeypatch.setattr(analyses, "trim_heap", lambda: log.append("release"))
    monkeypatch.setattr(overlap, "trim_heap", lambda: log.append("release"))
    analyses.records([_Traced("E1", log), _Traced("E2", log)], {}, {}, "m", None)
    assert log == ["measure E1", "release", "measure E2", "release"]
    log.clear()
    measure_in_parallel([_Traced("E1", log), _Traced("E2", log), _Traced("E3", log)])
    assert log.count("release") == 3  # one per analysis, whichever thread ran it
    assert sorted(e for e in log if e != "release") == ["measure E1", "measure E2", "measure E3"]
