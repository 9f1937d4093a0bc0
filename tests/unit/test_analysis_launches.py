r"""What the analyses launch and read back on an accelerator, counted on the CPU: tiny Llamas of 2 and 4 layers
and of 4 and 8 heads, each hypothesis's ``measure`` run on the ``Elsewhere`` device (``tests/elsewhere.py``: CPU
tensors that report a non-CPU device, so every device-dependent branch takes its accelerator path, and ``.numpy()``
of a device tensor raises as on CUDA).

The statistics are fed on the CPU as usual; just before ``measure`` they (and, for E7, the attention weights and
the model whose norms it applies) move to ``Elsewhere``. A ``TorchFunctionMode`` then counts:

- **calls**: every torch function the analysis calls, outside ``core.top_eigen``'s iterations (whose number
  depends on the matrices' spectra, not on the model's shape; they are bounded below);
- **host reads**: ``.item()``, ``.tolist()``, ``.cpu()``, ``.numpy()``, ``bool``/``float``/``int`` of a tensor and
  ``.to("cpu")`` of one on the device (a GPU synchronises at each).

The rule: the calls grow at most linearly in the layers (4 layers at most twice the calls of 2: linear with a
non-negative intercept) and not at all with the heads (8 heads exactly the calls of 4); the host reads outside
the iterative solver do not grow with either (the same count for all four models); inside it, at most one read
per iteration and one to start, per call, and the number of solver calls does not grow with the layers or the
heads (the layers of a batch share a call). On the code before the analyses were batched over layers, E3 and E6
read their numbers to the host once or more per layer (E6 per layer, fold and ridge) and fail; E7's path is one
sequence of per-layer products by nature (linear in the layers) and passed already.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections import Counter

import pytest
import torch
from elsewhere import ELSEWHERE, elsewhere, to_elsewhere
from tiny_models import build_tiny
from torch.overrides import TorchFunctionMode

from expattn.core import top_eigen as eigensolver
from expattn.probes.hypotheses import estimator
from expattn.probes.models.subject import subject_from_model
from expattn.probes.runner import ProbeConfig, probe_subject

CLAIMS = ("E3", "E6", "E7")
WIDTH, SEQUENCES, SEQ_LEN = 64, 10, 32
READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.cpu, torch.Tensor.numpy, torch.Tensor.__bool__,
         torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__index__}
SOLVER = eigensolver.__file__


def _in_solver() -> bool:
    """Whether the current call comes from inside ``core.top_eigen``."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == SOLVER:
            return True
        frame = frame.f_back
    return False


class Launches(TorchFunctionMode):
    """Counts ``calls`` and ``reads`` outside the iterative solver and ``solver_reads`` inside it (module
    docstring); a read is one of a tensor on the device."""

    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        solver = _in_solver()
        first = args[0] if args else None
        on_device = isinstance(first, torch.Tensor) and first.device.type == ELSEWHERE.type
        to_host = func is torch.Tensor.to and any(
            str(a).startswith("cpu") for a in (*args[1:], kwargs.get("device")) if a is not None)
        if on_device and (func in READS or to_host):
            self.counts["solver_reads" if solver else "reads"] += 1
        elif not solver:
            self.counts["calls"] += 1
        return func(*args, **kwargs)


HOST_SIDE = {"ctx", "directions"}  # an estimator's attributes that stay on the host in a run on a GPU


def _move(value, seen: set, keep: frozenset = frozenset()):
    """``value`` with every tensor inside (lists, tuples, dicts, expattn's statistics objects) on ``Elsewhere``;
    objects are moved in place, but for their attributes named in ``keep``."""
    if isinstance(value, torch.Tensor):
        return to_elsewhere(value)
    if isinstance(value, list):
        return [_move(v, seen) for v in value]
    if isinstance(value, tuple):
        return tuple(_move(v, seen) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, seen) for k, v in value.items()}
    if type(value).__module__.startswith("expattn.") and hasattr(value, "__dict__") and id(value) not in seen:
        seen.add(id(value))
        for name, item in vars(value).items():
            if name not in keep:
                setattr(value, name, _move(item, seen))
    return value


def _on_device(est) -> None:
    """The estimator's statistics, and the model and attention weights its context holds, on ``Elsewhere``."""
    _move(est, set(), frozenset(HOST_SIDE))
    model = copy.deepcopy(est.ctx.model)
    to_elsewhere(model)
    attention = tuple(dataclasses.replace(w, **{f.name: to_elsewhere(getattr(w, f.name))
                                              for f in dataclasses.fields(w)
                                              if isinstance(getattr(w, f.name), torch.Tensor)})
                      for w in est.ctx.attention)
    est.ctx = dataclasses.replace(est.ctx, model=model, attention=attention)


def _analyses(layers: int, heads: int) -> dict[str, Counter]:
    """``_count`` with its patches undone afterwards (each model's run patches the unpatched code)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _count(layers, heads, monkeypatch)


def _count(layers: int, heads: int, monkeypatch) -> dict[str, Counter]:
    """Per hypothesis, the launch counts of its ``measure`` on ``Elsewhere`` for a tiny Llama of ``layers`` blocks
    and ``heads`` heads, with the iterative solver's calls and iterations (``solver_calls``, ``iterations``)."""
    counts: dict[str, Counter] = {}
    current: list[Counter] = []
    solve = eigensolver.top_eigen

    def counted_solve(*args, **kwargs):
        out = solve(*args, **kwargs)
        if current:
            current[-1]["solver_calls"] += 1
            current[-1]["iterations"] += out.iterations
        return out

    for name, module in list(sys.modules.items()):
        if name.startswith("expattn.") and getattr(module, "top_eigen", None) is solve:
            monkeypatch.setattr(module, "top_eigen", counted_solve)

    def counted(claim, measure):
        def run(self):
            _on_device(self)
            mode = Launches()
            current.append(mode.counts)
            with elsewhere(), mode:
                out = measure(self)
            counts[claim] = current.pop()
            return out
        return run

    for claim in CLAIMS:
        cls = estimator(claim)
        monkeypatch.setattr(cls, "measure", counted(claim, cls.measure))
    model = build_tiny("llama", 0, hidden_size=WIDTH, num_attention_heads=heads, num_key_value_heads=heads // 2,
                       intermediate_size=2 * WIDTH, num_hidden_layers=layers)
    ids = torch.randint(0, 30_522, (SEQUENCES, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    config = ProbeConfig(model="tiny", tokens=ids.numel(), seq_len=SEQ_LEN, detail_sequences=4, hypotheses=CLAIMS)
    outcome = probe_subject(subject_from_model(model, None), config, None, input_ids=ids, speedups=False)
    errors = {r.id: r.notes for r in outcome.records if r.verdict in ("error", "skipped")}
    assert not errors, errors  # every analysis ran on the device to its end
    return counts


def violations(few_layers: Counter, many_layers: Counter, few_heads: Counter, many_heads: Counter) -> list[str]:
    """The broken parts of the rule (module docstring), given the counts of the 2- and 4-layer models (4 heads)
    and of the 4- and 8-head models (2 layers)."""
    out = []
    if many_layers["calls"] > 2 * few_layers["calls"]:
        out.append(f"calls grow faster than the layers: {few_layers['calls']} -> {many_layers['calls']}")
    if many_heads["calls"] != few_heads["calls"]:
        out.append(f"calls grow with the heads: {few_heads['calls']} -> {many_heads['calls']}")
    models = (few_layers, many_layers, few_heads, many_heads)
    if len({c["reads"] for c in models}) > 1:
        out.append(f"host reads outside the solver change with the model: {[c['reads'] for c in models]}")
    if len({c["solver_calls"] for c in models}) > 1:
        out.append(f"solver calls change with the model: {[c['solver_calls'] for c in models]}")
    for c in models:
        if c["solver_reads"] > c["iterations"] + c["solver_calls"]:
            out.append(f"{c['solver_reads']} solver reads for {c['iterations']} iterations of {c['solver_calls']} "
                       "calls")
    return out


def test_the_rule_catches_reads_per_layer_calls_per_head_and_superlinear_calls():
    """Negative controls through ``violations``: a read per layer, a call per head, calls quadratic in the layers
    and a read per iteration too many are each caught; counts that keep the rule pass."""
    def counts(calls, reads=3, solver_calls=1, iterations=10, solver_reads=11):
        return Counter(calls=calls, reads=reads, solver_calls=solver_calls, iterations=iterations,
                       solver_reads=solver_reads)

    good = [counts(100), counts(150), counts(100), counts(100)]
    assert violations(*good) == []
    per_layer = [counts(100, 2), counts(150, 4), counts(100, 2), counts(100, 2)]
    assert any("reads" in v for v in violations(*per_layer))
    per_head = [counts(100), counts(150), counts(100), counts(140)]
    assert any("heads" in v for v in violations(*per_head))
    quadratic = [counts(40), counts(160), counts(40), counts(40)]
    assert any("faster than the layers" in v for v in violations(*quadratic))
    twice = [counts(100, solver_reads=21), counts(150), counts(100), counts(100)]
    assert any("solver reads" in v for v in violations(*twice))


@pytest.mark.slow
def test_analyses_launch_linearly_in_layers_nothing_per_head_and_read_back_once():
    runs = {(layers, heads): _analyses(layers, heads) for layers, heads in ((2, 4), (4, 4), (2, 8))}
    broken = {}
    for claim in CLAIMS:
        few_layers, many_layers, many_heads = (runs[s][claim] for s in ((2, 4), (4, 4), (2, 8)))
        assert few_layers["calls"] > 0  # the recorder saw the analysis
        if found := violations(few_layers, many_layers, few_layers, many_heads):
            broken[claim] = (found, {shape: dict(c[claim]) for shape, c in runs.items()})
    assert not broken, broken
