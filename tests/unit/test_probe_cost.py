r"""What the probe's analyses and updates cost, counted on the CPU: a tiny Llama probed for every hypothesis.

**Cubic operations.** A ``TorchFunctionMode`` records every call of a cubic linear-algebra routine (eigen and
singular value decompositions, Cholesky, inverses, solves, QR, ...) with its input's shape and the stage it ran
in (each hypothesis's analysis, from the runner's progress callback). The rule: an analysis may eigendecompose
per layer (``Sigma``'s ``(D, D)`` eigendecomposition, E3's and E6's per-layer spectra), but not per head: the
number of wide matrices (side at least ``D / 2``) that its eigen or singular value decompositions take, batch
elements counted, must not change when the model has twice the heads at the same width. That catches a
decomposition batched over heads and one looped over them alike, and leaves alone the small Rayleigh-Ritz
problems of an iterative top-k eigensolver (side a few times k). Per-head Cholesky factors and solves are
allowed: a third of a matrix product's work, where a symmetric eigendecomposition costs ~9 n^3 and runs badly on
a GPU (1,024 float32 ``eigh`` of width 4096 took most of a Llama-3-8B probe's analysis time).

**Updates' FLOPs.** ``torch.utils.flop_counter.FlopCounterMode`` counts the matrix products of the feeding stage;
each estimator's ``update`` is bracketed, so the updates' FLOPs are known per hypothesis and the rest of the
feeding stage is the model's forward passes (same tokens: the per-token ratio is the ratio of totals).
At this shape (width 128, 2 layers, 64-token sequences, 8 heads) the updates cost 0.59 times the forward (E5's
gradients 0.36, E8's per-head updates 0.15, E3's moments 0.07). ``UPDATE_MULTIPLE`` = 1 leaves room for that
noise-free count to grow by two thirds, and fails an update that adds one more dense per-token ``(D, D)`` product per
layer for each head (a per-head Fisher statistic streamed over every token, say): ``2 N D^2`` FLOPs per head and
layer, 0.82 times the forward here, which the test adds to the measured count as its negative control. The ratio is
judged on the model with more heads, where a per-head cost stands out most.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
import torch
from tiny_models import build_tiny
from torch.overrides import TorchFunctionMode
from torch.utils.flop_counter import FlopCounterMode

from expattn.probes.hypotheses.e4_readings import DEFLATIONS
from expattn.probes.models.subject import subject_from_model
from expattn.probes.runner import ESTIMATORS, ProbeConfig, probe_subject

EIGEN = {torch.linalg.eigh, torch.linalg.eigvalsh, torch.linalg.eig, torch.linalg.eigvals, torch.linalg.svd,
         torch.linalg.svdvals, torch.svd, torch.lobpcg, torch.svd_lowrank, torch.pca_lowrank}
CUBIC = EIGEN | {torch.linalg.cholesky, torch.linalg.cholesky_ex, torch.cholesky_inverse, torch.cholesky_solve,
                 torch.linalg.inv, torch.linalg.inv_ex, torch.linalg.solve, torch.linalg.solve_ex,
                 torch.linalg.lstsq, torch.linalg.qr, torch.linalg.pinv, torch.linalg.det, torch.linalg.slogdet,
                 torch.linalg.solve_triangular, torch.linalg.matrix_rank, torch.linalg.cond, torch.linalg.lu_factor}
WIDTH, LAYERS, SEQUENCES, SEQ_LEN = 128, 2, 8, 64
UPDATE_MULTIPLE = 1.0
RITZ = 3 * (2 * max(DEFLATIONS) + 2)  # LOBPCG's largest Rayleigh-Ritz side for E4/E9's top pairs: 3 blocks of 2k + 2


@pytest.fixture(autouse=True)
def one_thread():
    """Each test on one intra-op torch thread, the count restored afterwards. What it counts (cubic calls, FLOPs)
    does not depend on the threads; their cost does: on a shared machine a second thread spins against other
    processes (this file took 52-58 s of CPU with two threads under load, 11 s with one)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class CubicCalls(TorchFunctionMode):
    """Records ``(stage, routine, input shape)`` for every call of a routine in ``CUBIC``; ``stage`` is set from
    outside (the progress callback)."""

    def __init__(self):
        super().__init__()
        self.stage = "outside"
        self.calls: list[tuple[str, str, tuple[int, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in CUBIC and args and isinstance(args[0], torch.Tensor):
            self.calls.append((self.stage, func.__name__, tuple(args[0].shape)))
        return func(*args, **(kwargs or {}))


def wide_eigen(calls: list[tuple[str, str, tuple[int, ...]]], width: int) -> Counter:
    """Per stage, how many matrices of side at least ``width / 2`` the eigen and singular value decompositions
    took (a batch of ``n`` counts ``n``). A Rayleigh-Ritz problem of the top-k solver (side at most ``RITZ``: three
    blocks of ``2k + 2`` columns for the largest k E4/E9 ask for, ``core.top_eigen``) is not a wide matrix at the
    widths the probe is for (126 at k = 20 against D >= 384), only at this test's width 128."""
    names = {f.__name__ for f in EIGEN}
    out: Counter = Counter()
    for stage, name, shape in calls:
        if name in names and len(shape) >= 2 and min(shape[-2:]) >= width / 2 and min(shape[-2:]) > RITZ:
            out[stage] += int(torch.Size(shape[:-2]).numel())
    return out


def grows_with_heads(few: Counter, many: Counter) -> dict[str, tuple[int, int]]:
    """The stages whose count of wide eigendecompositions differs between the model with few heads and the one
    with twice as many, with both counts."""
    return {s: (few[s], many[s]) for s in sorted(set(few) | set(many)) if few[s] != many[s]}


def _probe(heads: int, monkeypatch) -> tuple[CubicCalls, dict[str, int], int]:
    """The tiny Llama with ``heads`` heads probed for every hypothesis under both recorders: the cubic calls, the
    updates' FLOPs per hypothesis and the forward passes' FLOPs. The top-k solver runs its accelerator path
    (LOBPCG), which ``method="auto"`` keeps for devices other than the CPU."""
    monkeypatch.setattr("expattn.core.top_eigen.DENSE_DEVICES", set())
    model = build_tiny("llama", 0, hidden_size=WIDTH, num_attention_heads=heads, num_key_value_heads=heads // 2,
                       intermediate_size=2 * WIDTH, num_hidden_layers=LAYERS)
    ids = torch.randint(0, 30_522, (SEQUENCES, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    config = ProbeConfig(model="tiny", tokens=ids.numel(), seq_len=SEQ_LEN, detail_sequences=4)
    calls, flops = CubicCalls(), FlopCounterMode(display=False)
    updates: dict[str, int] = defaultdict(int)
    feeding: dict[str, int] = {}

    def bracketed(update):
        def run(self, *args, **kwargs):
            before = flops.get_total_flops()
            update(self, *args, **kwargs)
            updates[self.claim] += flops.get_total_flops() - before
        return run

    for cls in ESTIMATORS:
        if "update" in cls.__dict__:
            monkeypatch.setattr(cls, "update", bracketed(cls.__dict__["update"]))

    def progress(done, total, stage):
        calls.stage = f"analysis {','.join(stage.hypotheses)}" if stage.name == "analyses" else stage.name
        feeding.setdefault(stage.name, flops.get_total_flops())

    with flops, calls:
        probe_subject(subject_from_model(model, None), config, None, progress, input_ids=ids, speedups=False)
    forward = feeding["analyses"] - feeding["feeding"] - sum(updates.values())
    return calls, dict(updates), forward


def test_the_rule_catches_per_head_eigendecompositions_batched_or_looped():
    """Negative controls through ``wide_eigen`` and ``grows_with_heads``: per-head (D, D) eigendecompositions,
    batched and looped, are caught; one per layer and small Rayleigh-Ritz problems are not."""
    counts = []
    for heads in (4, 8):
        calls = CubicCalls()
        with calls:
            calls.stage = "batched"
            torch.linalg.eigh(torch.eye(WIDTH).expand(heads, WIDTH, WIDTH))
            calls.stage = "looped"
            for _ in range(heads):
                torch.linalg.eigvalsh(torch.eye(WIDTH))
            calls.stage = "per layer"
            for _ in range(LAYERS):
                torch.linalg.eigh(torch.eye(WIDTH))
            calls.stage = "rayleigh-ritz"
            torch.linalg.eigh(torch.eye(3 * 5).expand(heads, 15, 15))
        counts.append(wide_eigen(calls.calls, WIDTH))
    assert grows_with_heads(*counts) == {"batched": (4, 8), "looped": (4, 8)}


@pytest.mark.slow
def test_analyses_do_no_per_head_eigendecomposition_and_updates_stay_within_a_multiple_of_the_forward(
        monkeypatch):
    few, _, _ = _probe(4, monkeypatch)
    many, updates, forward = _probe(8, monkeypatch)
    table = "\n".join(f"  {stage}: {name} {shape}" for stage, name, shape in sorted(set(many.calls)))
    per_head = grows_with_heads(wide_eigen(few.calls, WIDTH), wide_eigen(many.calls, WIDTH))
    assert not per_head, f"per-head (D, D) eigendecompositions (4, 8 heads): {per_head}; cubic calls:\n{table}"
    assert any(stage.startswith("analysis") for stage, _, _ in many.calls)  # the recorder saw the analyses
    ratio = sum(updates.values()) / forward
    assert 0 < ratio <= UPDATE_MULTIPLE, f"updates' FLOPs {ratio:.2f} x the forward's; per hypothesis {updates}"
    # negative control through the same rule: one more (D, N) @ (N, D) product per head and layer, 2 N D^2 FLOPs each
    per_head_scatter = 2 * SEQUENCES * SEQ_LEN * WIDTH**2 * 8 * LAYERS
    assert (sum(updates.values()) + per_head_scatter) / forward > UPDATE_MULTIPLE
