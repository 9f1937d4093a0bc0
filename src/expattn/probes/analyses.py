"""The probe's step 4, *analyse*: each fitted estimator's measurement, verdict and figure as one record (rank 0)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from expattn.catalogue import entry
from expattn.probes.hypotheses import hypotheses
from expattn.probes.hypotheses.base import Measured
from expattn.probes.overlap import measure_in_parallel, trim_heap
from expattn.probes.progress import Stage
from expattn.results.record import Record, enforce_controls, error_record


def records(estimators: list, inapplicable: dict[str, str], failed: dict[str, Record], model_name: str,
            out_dir: Path | None, report: Callable[[Stage], None] | None = None,
            parallel: bool = False) -> tuple[list[Record], dict[str, float], dict[str, Measured]]:
    """Step 4 (rank 0): one record per chosen hypothesis: ``skipped`` with the reason where it cannot apply,
    ``error`` (the exception and its traceback) where its update or its analysis raised, else its verdict; each
    estimator's analysis wall seconds; and what each measured (the figure's numbers, ``drawings``). One estimator's
    error does not stop the others; ``failed`` holds the error records of the updates, kept as they are. With
    ``parallel`` (the updates overlapped the forward passes on a spare core) the analyses run two at a time
    (``measure_in_parallel``; the same numbers); judging and plotting stay on this thread. ``report`` hears the
    ``analyses`` stage before each hypothesis (``expattn.probes.progress``)."""
    out, seconds, kept = [], {}, {}
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    healthy = [est for est in estimators if est.claim not in failed]
    analysed = measure_in_parallel(healthy) if parallel else {}  # the spare core the updates had
    for k, est in enumerate(estimators):
        if report is not None:
            report(Stage("analyses", k, len(estimators), (est.claim,)))
        t0 = time.perf_counter()
        measured, elsewhere = analysed.pop(est.claim, (None, 0.0))
        try:
            if est.claim in failed:
                record = failed[est.claim]
            else:
                if isinstance(measured, Exception):
                    raise measured
                with torch.no_grad():
                    measured = est.measure() if measured is None else measured
                    record = est.result(out_dir, measured)
                kept[est.claim] = measured
                trim_heap()  # its transient goes back before the next analysis allocates its own
        except OSError:  # writing its plot failed (a full disk...): an error of the run, not a verdict
            raise
        except Exception as err:  # one failing analysis must not discard the others: report it
            record = error_record(est.claim, "empirical", "analysis", err)
        seconds[est.claim] = time.perf_counter() - t0 + elsewhere
        record.statement, record.source = entry(record.id).statement, entry(record.id).seeds
        record.details["model"] = model_name
        out.append(enforce_controls(record))
    for claim, why in inapplicable.items():
        out.append(Record(claim, "empirical", "skipped", notes=f"does not apply to this model: {why}",
                          statement=entry(claim).statement, source=entry(claim).seeds, details={"model": model_name}))
    order = hypotheses()
    out.sort(key=lambda r: order.index(r.id))
    return out, seconds, kept
