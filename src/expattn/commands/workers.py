"""Work side by side in spawned worker processes, with what each item is doing relayed to one progress display.

``side_by_side(work, items, jobs, display)`` runs ``work(item, tell)`` for every item in ``jobs``
worker processes (``spawn``: a fresh interpreter, no forked torch threads) and returns the results
in the items' order. Items are handed out in the given order, each to the next free worker, so the
caller lists the longest first. Each worker gets its share of torch's intra-op threads
(``threads_per_job``), and so do its BLAS and OpenMP pools (numpy's OpenBLAS among them: the
variables ``THREAD_VARIABLES`` in its environment, which the libraries read when they load): ``jobs``
workers use the cores one process would, not ``jobs`` times as many.

``tell.describe(text)`` and ``tell.advance()`` inside a worker reach ``display`` in this process.
A worker that dies (killed, out of memory) takes down the items then in flight (``concurrent.futures``
breaks the whole pool): those items run again, one at a time, each alone in a fresh worker with the
same threads, so the others finish with the same numbers (``display.died`` is told how the worker ended, e.g.
``signal 9``), and only an item that dies alone too comes back as a ``BrokenProcessPool`` that says how its
worker ended (``worker died (signal 9)``), in place of its result. Ctrl-C reaches only this
process (workers ignore SIGINT); on any exception here, Ctrl-C and SIGTERM (``expattn.terminal``)
included, the workers are terminated before it propagates, and a worker whose parent is gone exits
by itself within a second; the pools' semaphores are then removed by ``multiprocessing``'s resource tracker,
quietly (``_quiet_tracker``).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue as queues
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import resource_tracker
from typing import Protocol, TypeVar

import torch

Item = TypeVar("Item")
Result = TypeVar("Result")
POLL_SECONDS = 0.2  # how often the display is refreshed from the workers' messages
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class Tell(Protocol):
    """What a piece of work tells the display: what it is doing now, and that one more step is done."""

    def describe(self, text: str) -> None: ...

    def advance(self) -> None: ...


class Display(Protocol):
    """The progress display, told by the item at index ``item``."""

    def describe(self, item: int, text: str) -> None: ...

    def advance(self) -> None: ...

    def finish(self, item: int) -> None: ...

    def died(self, item: int, how: str) -> None: ...


def usable() -> bool:
    """Whether worker processes can be started here: their queues need POSIX semaphores (on Linux in /dev/shm),
    which some containers do not provide."""
    try:
        multiprocessing.get_context("spawn").Queue().close()
    except (OSError, NotImplementedError, ImportError):
        return False
    return True


def threads_per_job(jobs: int) -> int:
    """torch intra-op threads of each of ``jobs`` workers: an equal share of this process's, at least 1."""
    return max(1, torch.get_num_threads() // jobs)


def auto_jobs(items: int) -> int:
    """Workers for ``items`` items by default: one per torch intra-op thread of this process, at most one per item."""
    return max(1, min(items, torch.get_num_threads()))


class WorkerDied(BrokenProcessPool):
    """The worker process of an item ended under it; ``how``: ``signal N`` or ``exit code N``."""

    def __init__(self, how: str) -> None:
        super().__init__(f"worker died ({how})")
        self.how = how


_messages: multiprocessing.Queue | None = None  # a worker's channel to the display (set by _start)


@contextmanager
def _environment(**variables: str) -> Iterator[None]:
    """``os.environ`` with ``variables`` set inside (for the processes spawned there), as it was after."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _quiet_tracker() -> None:
    """Start ``multiprocessing``'s resource tracker, if it is not running yet, with its stderr on ``os.devnull``.

    The tracker is the process that unlinks the pools' semaphores (their queues') when this process is killed
    (kill -9): it still does, without the warning ``There appear to be 8 leaked semaphore objects`` that would
    otherwise be the last line a user sees. Only the tracker's stderr is redirected: fd 2 is restored at once."""
    saved = os.dup(2)
    try:
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 2)
        os.close(quiet)
        resource_tracker.ensure_running()
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _start(messages: multiprocessing.Queue, threads: int, log_level: int, parent: int) -> None:
    global _messages
    _messages = messages
    torch.set_num_threads(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.getLogger("expattn").setLevel(log_level)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


@dataclass(frozen=True)
class _Relay:
    """``Tell`` inside a worker: messages to the display's process."""

    item: int

    def describe(self, text: str) -> None:
        assert _messages is not None
        _messages.put((self.item, text))

    def advance(self) -> None:
        assert _messages is not None
        _messages.put((self.item, None))


def _run(work: Callable[[Item, Tell], Result], index: int, item: Item) -> Result:
    return work(item, _Relay(index))


def _deliver(messages: multiprocessing.Queue, display: Display) -> None:
    """Pass every message waiting in ``messages`` to ``display``."""
    while True:
        try:
            index, text = messages.get_nowait()
        except queues.Empty:
            return
        if text is None:
            display.advance()
        else:
            display.describe(index, text)


def side_by_side(work: Callable[[Item, Tell], Result], items: Sequence[Item], jobs: int,
                 display: Display) -> list[Result | BaseException]:
    """``[work(item, tell) for item in items]``, computed in ``jobs`` spawned worker processes.

    Args:
        work: a module-level function (or a ``functools.partial`` of one) of picklable arguments.
        items: picklable items, longest first.
        jobs: worker processes, >= 1.
        display: told what each item is doing (``describe``), each step done (``advance``), each item's end
            (``finish``) and each item whose worker died under it before it ran again alone (``died``).

    Returns:
        Each item's result, or the exception that took its worker down when it ran alone, in the order of ``items``.
    """
    threads = threads_per_job(jobs)  # alone too: an item's numbers do not depend on whether a neighbour died
    results = _in_pool(work, dict(enumerate(items)), jobs, threads, display)
    for index, result in sorted(results.items()):
        if isinstance(result, BrokenProcessPool):
            display.died(index, result.how if isinstance(result, WorkerDied) else "no exit status")
            results.update(_in_pool(work, {index: items[index]}, 1, threads, display))
    return [results[i] for i in range(len(items))]


def _in_pool(work: Callable[[Item, Tell], Result], items: dict[int, Item], jobs: int, threads: int,
             display: Display) -> dict[int, Result | BaseException]:
    """``work`` of each item (by index) in one pool of ``jobs`` workers of ``threads`` threads; a broken pool's items
    give its exception."""
    context = multiprocessing.get_context("spawn")
    _quiet_tracker()
    messages = context.Queue()
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_start,
        initargs=(messages, threads, logging.getLogger("expattn").level, os.getpid()),
    )
    results: dict[int, Result | BaseException] = {}
    workers: set[multiprocessing.process.BaseProcess] = set()
    try:
        with _environment(**dict.fromkeys(THREAD_VARIABLES, str(threads))):  # submit spawns the workers
            futures = {pool.submit(_run, work, index, item): index for index, item in items.items()}
        pending = set(futures)
        while pending:
            workers |= set(multiprocessing.active_children()) - before
            done, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_COMPLETED)
            _deliver(messages, display)
            for future in done:
                index = futures[future]
                error = future.exception()
                results[index] = future.result() if error is None else error
                if isinstance(error, BrokenProcessPool):
                    results[index] = WorkerDied(_ending(workers))
                else:
                    display.finish(index)
    except BaseException:
        for process in set(multiprocessing.active_children()) - before:
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    _deliver(messages, display)  # the last steps of items that ended just now
    return results


def _ending(workers: set[multiprocessing.process.BaseProcess]) -> str:
    """How the first of ``workers`` to die ended: ``signal N`` or ``exit code N`` (the pool terminates the others
    with SIGTERM once one dies, so SIGTERM is named only when no worker ended otherwise)."""
    for process in workers:
        process.join(timeout=1.0)
    codes = [p.exitcode for p in workers if p.exitcode not in (None, 0)]
    code = next((c for c in codes if c != -signal.SIGTERM), codes[0] if codes else None)
    if code is None:
        return "no exit status"
    return f"signal {-code}" if code < 0 else f"exit code {code}"
