"""Wall-clock provenance in ``timings.json``, beside a ``results.json`` that a seed fixes byte for byte.

A results document (``results_document``) holds the records and the run's provenance; the part of it that is
measured on the clock (how long each check, hypothesis or stage took, when the run started) differs between two
runs at one seed. ``write_results`` writes that part to ``timings.json`` and the rest to ``results.json``, both
through ``write_json_atomic`` into the same (staging) folder, so ``results.json`` of two runs at one seed are
the same bytes. ``read_document`` puts the two back together for the readers (the report, the findings script).

What is on the clock: the top-level keys ``WALL_CLOCK`` and, in each entry of a report's ``stages``, the keys
``STAGE_CLOCK``; ``timings.json`` keeps the stages' as ``stages: {name: {seconds, cpu_seconds}}``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from expattn.results.files import RESULTS, write_json_atomic

TIMINGS = "timings.json"
WALL_CLOCK = ("timings", "seconds", "forward_seconds", "stats_seconds", "forward_cpu_seconds", "stats_cpu_seconds",
              "started", "total_seconds")
STAGE_CLOCK = ("seconds", "cpu_seconds")


def split_timings(document: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(results, timings)``: ``document`` without what the clock measured, and what it measured."""
    results = {k: v for k, v in document.items() if k not in WALL_CLOCK}
    timings = {k: document[k] for k in WALL_CLOCK if k in document and document[k] != {}}  # {}: nothing timed
    stages = document.get("stages")
    if isinstance(stages, list) and all(isinstance(s, dict) and "name" in s for s in stages):
        results["stages"] = [{k: v for k, v in s.items() if k not in STAGE_CLOCK} for s in stages]
        timings["stages"] = {s["name"]: {k: s[k] for k in STAGE_CLOCK if k in s} for s in stages}
    return results, timings


def join_timings(results: dict[str, Any], timings: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``split_timings``: ``join_timings(*split_timings(d)) == d``."""
    document = {**results, **{k: v for k, v in timings.items() if k != "stages"}}
    clock = timings.get("stages") or {}
    if isinstance(results.get("stages"), list):
        document["stages"] = [{**s, **clock.get(s.get("name"), {})} for s in results["stages"]]
    return document


def timings_path(path: str | os.PathLike) -> Path:
    """Where the wall clock of the results file ``path`` goes: ``timings.json`` beside a ``results.json``,
    ``NAME.timings.json`` beside any other ``NAME.json`` (``expattn verify --json NAME.json``)."""
    path = Path(path)
    return path.with_name(TIMINGS if path.name == RESULTS else f"{path.stem}.{TIMINGS}")


def write_results(path: str | os.PathLike, document: dict[str, Any]) -> Path:
    """Write ``document`` to the results file ``path`` (a folder: its ``results.json``) without the wall clock,
    and the wall clock (when there is any) to ``timings_path(path)``, timings first; returns the results path.
    When the results file cannot be written (a full disk), a timings file this call created is removed again: a
    failed write leaves nothing behind."""
    path = Path(path)
    path = path / RESULTS if path.is_dir() else path
    results, timings = split_timings(document)
    beside = timings_path(path)
    new = timings and not beside.exists()
    if timings:
        write_json_atomic(beside, timings)
    try:
        return write_json_atomic(path, results)
    except BaseException:
        if new:
            beside.unlink(missing_ok=True)
        raise


def read_document(path: str | os.PathLike) -> dict[str, Any]:
    """The results document at ``path`` (a ``results.json``) with its sibling ``timings.json`` joined back in,
    when there is one (a document written before the split holds its timings itself)."""
    path = Path(path)
    results = json.loads(path.read_text(encoding="utf-8"))
    beside = timings_path(path)
    if not beside.is_file():
        return results
    return join_timings(results, json.loads(beside.read_text(encoding="utf-8")))
