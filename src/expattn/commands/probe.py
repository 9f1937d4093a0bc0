"""``expattn probe``: the probe's records and plots written to an output folder, all or nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from expattn.probes.runner import ProbeConfig, ProbeOutcome, probe
from expattn.results.files import write_json_atomic
from expattn.results.outputs import check_output_folder, output_folder


def probe_to_dir(
    config: ProbeConfig, out: Path, progress: Callable[[int, int], None] | None = None, overwrite: bool = False
) -> ProbeOutcome:
    """Run the probe and write ``out/results.json`` plus the PNG plots, all or nothing.

    ``out`` follows the one rule of output folders (``expattn.results.outputs``; ``overwrite`` is
    ``--overwrite``). Everything is written into a temporary sibling folder moved into ``out`` at
    the end, so a failure leaves no partial folder. Under ``torchrun`` only rank 0 writes.

    Raises:
        ValueError: as ``probe``, or when the rule refuses ``out`` or another process is writing it.
    """
    check_output_folder(out, overwrite)
    config.validate()
    if int(os.environ.get("RANK", "0")) != 0:
        return probe(config, None, progress)
    with output_folder(out, overwrite=overwrite) as tmp:
        outcome = probe(config, tmp, progress)
        write_json_atomic(tmp / "results.json", outcome.document())
    return outcome
