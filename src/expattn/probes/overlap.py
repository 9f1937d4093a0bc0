r"""The feeding step's speed machinery, behind one switch (``speedups``); no part of it changes a number.

**Overlap.** Estimator updates in a worker thread, overlapped with the model's next forward computation.

$$t_{\text{wall}} \approx \sum_b \max(f_b, s_b) \quad\text{instead of}\quad \sum_b (f_b + s_b)$$

for forward time $f_b$ and statistics time $s_b$ of batch $b$, given a second core: torch's
kernels (BLAS, SDPA, reductions) release the GIL, so the estimators' products on block $i$ run
while the model computes block $i + 1$. Jobs run one at a time in submission order, so every
statistic sees exactly the updates, in exactly the order, of the synchronous loop; results are
bitwise those of the synchronous run (tested). At most ``depth`` blocks wait in the queue, which
bounds the activations kept alive. After the last batch, ``measure_in_parallel`` runs the estimators' analyses
on the same two cores.

**Heap trimming.** Each batch frees tens of MiB of activations; glibc keeps freed heap pages mapped and
fragmentation lets the heap creep up over hundreds of batches, so without trimming the peak depends on the run's
length. ``heap_trimmer`` calls glibc's ``malloc_trim(0)`` after a batch when the resident size has grown more than
``TRIM_SLACK`` over its size after the first batch; trimming after every batch would make the next forward pass
fault those pages in again (~0.5 s per 20,000 MiniLM tokens), hence the threshold. After each analysis
(``measure_in_parallel``, ``analyses.records``) ``trim_heap`` gives its freed transient back at once: without it the
resident size crept up analysis after analysis (SmolLM2: 3.76 -> 4.35 GiB over E3-E9; 3.15-3.19 GiB between
analyses with a ``gc.collect`` and the trim, benchmarks/RESULTS.md). Only the trim (well under a millisecond): a
``gc.collect`` costs a quarter of a second per million live objects, nine times per probe.

**Large blocks mapped apart where memory is tight.** Trimming gives back only whole free pages: blocks that glibc
placed in its heaps (by default those below a threshold that rises to 32 MiB as the run frees large ones) leave the
heaps fragmented, and a run after another in the same process, a random-init twin after its model, ran 17-21%
above its estimate (the bfloat16 Qwen2.5 1.5B's twin: 21.70 GiB against 18.6 printed, 1.8 GiB short of this
machine's memory; SmolLM2's twin: 3.49 against 2.9). With glibc's ``M_MMAP_THRESHOLD`` fixed at 1 MiB every larger
block is mapped on its own and goes back when freed: SmolLM2's twin then peaked at 2.93 GiB against 2.8 (+5%), its
model at 3.08 against 3.1, but the page faults of the blocks mapped afresh every batch cost the short run 27% of
its time (4 or 16 MiB kept the heaps' excess; a single arena changed nothing; benchmarks/RESULTS.md). So only a
run whose estimated peak is above ``TIGHT`` of the host's memory maps its large blocks apart (``map_when_tight``),
for the rest of its process: where the memory is tight the estimate must hold, and a large model's forward
passes dwarf the faults (the 1.5B's next twins: 18.10 and 18.16 GiB against 18.0 and 17.9 printed, in 3-7% more
time).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from expattn import memory
from expattn.arguments import positive_int

_STOP = object()
M_MMAP_THRESHOLD = -3  # mallopt's parameter (glibc's malloc.h); setting it also ends glibc's moving threshold
MAPPED_FROM = 2**20  # bytes: blocks at least this large are mapped apart where memory is tight (map_when_tight)
TIGHT = 0.5  # a run whose estimated peak is above this share of the host's memory is tight
TRIM_SLACK = 0.10  # relative growth of the resident size that triggers a heap trim (see heap_trimmer)


@dataclass(frozen=True)
class Speedups:
    """What the feeding step runs besides the science: ``worker`` takes the statistics' updates off the forward
    pass (None: they run in the loop), ``trim`` is called after each batch (None: never)."""

    worker: UpdateWorker | None
    trim: Callable[[], None] | None


def speedups(enabled: bool | None, device: torch.device | str, thread_safe: bool) -> Speedups:
    """The one switch. ``False``: neither part (the plain loop); ``True``: both, the worker even where it cannot
    help; ``None``: each part where it helps and is safe: the worker for one CPU process with a core to spare
    (``overlap_available``) whose estimators are ``thread_safe``, the trim where glibc and /proc have it."""
    if enabled is False:
        return Speedups(None, None)
    threaded = enabled or (thread_safe and overlap_available(device))
    return Speedups(UpdateWorker() if threaded else None, heap_trimmer())


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None without glibc), looked up once."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None


def trim_heap() -> None:
    """glibc's ``malloc_trim(0)`` (nothing without glibc): the heap pages freed since go back to the system."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def map_large_blocks() -> bool:
    """glibc's ``mallopt(M_MMAP_THRESHOLD, MAPPED_FROM)`` for the rest of this process: every block of at least
    ``MAPPED_FROM`` bytes gets a mapping of its own, which goes back to the system when it is freed, instead of a place
    in a heap that fragmentation keeps resident (see the module docstring). True when set (False without glibc)."""
    name = ctypes.util.find_library("c")
    mallopt = getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    return bool(mallopt is not None and mallopt(M_MMAP_THRESHOLD, MAPPED_FROM))


def map_when_tight(peak: int) -> bool:
    """``map_large_blocks`` when a run's estimated ``peak`` (bytes) is above ``TIGHT`` of the host's memory: there
    the resident size must stay by its estimate, and the page faults of blocks mapped afresh cost least beside the
    large model's forward passes. True when set."""
    total = memory.host_total()
    return total is not None and peak > TIGHT * total and map_large_blocks()


def release_heap() -> None:
    """Between two runs in one process (a model's probe, then each random-init twin's): collect the freed
    statistics and give the heap pages glibc keeps back to the system (``malloc_trim(0)``), so the next run's
    peak does not sit on top of the last one's."""
    gc.collect()
    trim_heap()


def heap_trimmer() -> Callable[[], None] | None:
    """After each batch: glibc's ``malloc_trim(0)`` when the resident size has grown more than ``TRIM_SLACK`` over
    its size after the first batch (None where there is no glibc or /proc; see the module docstring)."""
    trim = _malloc_trim()
    if trim is None or not Path("/proc/self/statm").exists():
        return None
    page = os.sysconf("SC_PAGE_SIZE")
    first: list[int] = []

    def resident() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * page

    def after_batch() -> None:
        now = resident()
        if not first:
            first.append(now)
        elif now > first[0] * (1 + TRIM_SLACK):
            trim(0)

    return after_batch


def overlap_available(device: torch.device | str = "cpu") -> bool:
    """Whether overlapping can help: CPU tensors, and torch's threads leave one of this process's cores free."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return torch.device(device).type == "cpu" and torch.get_num_threads() < cores


class UpdateWorker:
    """Run ``job(*args)`` calls in one background thread, in order (a context manager).

    ``submit`` returns at once unless ``depth`` jobs are already waiting; ``drain`` waits for all
    of them. An exception raised by a job is raised again by the next ``submit`` or ``drain`` (and
    the jobs after it are discarded). Jobs run under ``torch.no_grad()`` as the submitting loop does
    (grad mode is per thread).

    Attributes:
        busy_seconds: wall time the worker spent running jobs.
        cpu_seconds: the worker thread's CPU time.
        blocked_seconds: wall time ``submit`` and ``drain`` spent waiting for the worker.
    """

    def __init__(self, depth: int = 2) -> None:
        positive_int("depth", depth)
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self.busy_seconds = self.cpu_seconds = self.blocked_seconds = 0.0

    def __enter__(self) -> UpdateWorker:
        self._thread = threading.Thread(target=self._run, name="expattn-probe-updates", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        self._queue.put(_STOP)
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        c0 = time.thread_time()
        with torch.no_grad():
            while (item := self._queue.get()) is not _STOP:
                job, args = item
                if self._error is None:  # after a failure the remaining jobs are discarded
                    t0 = time.perf_counter()
                    try:
                        job(*args)
                    except BaseException as err:  # handed to the submitting thread
                        self._error = err
                    self.busy_seconds += time.perf_counter() - t0
                self._queue.task_done()
        self.cpu_seconds = time.thread_time() - c0

    def _raise(self) -> None:
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def submit(self, job: Callable[..., None], *args: object) -> None:
        """Queue ``job(*args)``; waits while ``depth`` jobs are pending."""
        if self._thread is None:
            raise RuntimeError("UpdateWorker.submit outside its `with` block")
        self._raise()
        t0 = time.perf_counter()
        self._queue.put((job, args))
        self.blocked_seconds += time.perf_counter() - t0

    def drain(self) -> None:
        """Wait until every submitted job has run; raise the first job's exception, if any."""
        t0 = time.perf_counter()
        self._queue.join()
        self.blocked_seconds += time.perf_counter() - t0
        self._raise()


def measure_in_parallel(estimators: list, threads: int = 2) -> dict[str, tuple[object, float]]:
    """Each estimator's ``measure()`` in a pool of ``threads`` threads, taken in the order given: claim ->
    (its ``Measured``, or the exception it raised; the seconds it took). Analyses are independent (each reads its
    own statistics and seeds its own generators; two that share a result serialise on ``ctx.analyses_lock``),
    so the numbers are those of running them one after the other."""

    def run(est) -> tuple[object, float]:
        t0 = time.perf_counter()
        with torch.no_grad():  # grad mode is per thread
            try:
                outcome: object = est.measure()
            except Exception as err:  # reported in the estimator's record, as a sequential analysis would be
                outcome = err
        trim_heap()  # its transient goes back before the next analysis allocates its own
        return outcome, time.perf_counter() - t0

    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="expattn-probe-analyses") as pool:
        futures = {est.claim: pool.submit(run, est) for est in estimators}
    return {claim: future.result() for claim, future in futures.items()}
