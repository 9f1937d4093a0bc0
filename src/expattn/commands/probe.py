"""``expattn probe``: the probe's records and plots written to an output folder, all or nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from expattn.probes.runner import ProbeConfig, ProbeOutcome, probe
from expattn.results.files import staged, write_json_atomic


def probe_to_dir(config: ProbeConfig, out: Path, progress: Callable[[int, int], None] | None = None) -> ProbeOutcome:
    """Run the probe and write ``out/results.json`` plus the PNG plots, all or nothing.

    Everything is written into a temporary sibling folder renamed to ``out`` at the end, so a
    failure leaves no partial folder. Under ``torchrun`` only rank 0 writes.

    Raises:
        ValueError: as ``probe``, or when ``out`` exists and is not an empty folder.
    """
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"output folder {str(out)!r} already exists and is not empty")
    config.validate()
    if int(os.environ.get("RANK", "0")) != 0:
        return probe(config, None, progress)
    with staged(out) as tmp:
        outcome = probe(config, tmp, progress)
        write_json_atomic(tmp / "results.json", outcome.document())
    return outcome
