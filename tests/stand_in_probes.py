"""Stand-in probes for the report's worker processes: module-level, so a spawned worker imports them by name.

Each takes ``(model, ctx, progress)`` as ``expattn.commands.report_stages.probe_model`` does; ``model`` is a folder
whose name says what the stand-in does there.
"""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

import torch

from expattn.probes.progress import Stage
from expattn.results.record import Record


def probe(model: str, ctx, progress):
    """One supported E1 record that names the process that made it (``details.pid``) and its torch threads."""
    progress(1, 2, stage=Stage("feeding", 1, 2, ("E1",)))
    details = {"pid": os.getpid(), "threads": torch.get_num_threads()}
    record = Record(id="E1", kind="empirical", verdict="supported", details=details)
    return types.SimpleNamespace(records=[record], timings={"E1": {"update_seconds": 0.0}})


def dies(model: str, ctx, progress):
    """Ends its process at once for a folder named ``dies``; for ``dies-beside-another``, only while another
    probe runs beside it (its folder holds a file ``running`` of the other's), as a model that runs out of
    memory only beside another would; else ``probe``."""
    folder = Path(model)
    (folder / "running").write_text(str(os.getpid()))
    time.sleep(1.0)  # long enough for the other to start
    others = [p for p in folder.parent.iterdir() if p != folder and _alive(p / "running")]
    if folder.name == "dies" or (folder.name == "dies-beside-another" and others):
        os._exit(3)
    return probe(model, ctx, progress)


def _alive(pid_file: Path) -> bool:
    """Whether ``pid_file`` names a process that is still running."""
    try:
        os.kill(int(pid_file.read_text()), 0)
    except (FileNotFoundError, ProcessLookupError):
        return False
    return True


def waits(model: str, ctx, progress):
    """Writes its process ID to ``<model>/pid`` and sleeps for ten minutes."""
    (Path(model) / "pid").write_text(str(os.getpid()))
    time.sleep(600)
    return probe(model, ctx, progress)


def twin(model: str, ctx, progress, seed: int):
    """A twin's E1 record: ``not_supported`` (against the stand-in probe's ``supported``) with its seed as the
    headline number, naming its process; the process ends at once for an odd seed in a folder named ``twin-dies``."""
    if seed % 2 == 1 and Path(model).name == "twin-dies":
        os._exit(3)
    progress(1, 2, stage=Stage("feeding", 1, 2, ("E1",)))
    return [Record(id="E1", kind="empirical", verdict="not_supported", metrics={"median_raw_ratio_excl": float(seed)},
                   details={"pid": os.getpid()})]
