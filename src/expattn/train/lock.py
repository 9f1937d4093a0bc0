"""One writer per run folder: an OS file lock held for the whole run, and leftovers of killed writers removed.

``hold_run_folder(out)`` creates ``out``, takes an exclusive ``fcntl.flock`` on ``out/.lock`` (the
kernel releases it when the process exits in any way, SIGKILL included, so a lock is never stale)
and, holding it, removes the temporary files a killed writer leaves behind: ``.checkpoint.safetensors.*``,
``.metrics.jsonl.*``, ``.config.json.*`` (atomic writes cut before their rename) and ``.model.tmp-*`` /
``.model.old-*`` (a model export cut before or after its folder swap). A second process that asks for
the lock while it is held gets ``RunFolderBusy`` at once instead of waiting.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK = ".lock"
# Prefixes of the temporary siblings that expattn.results.files gives the files of a run folder.
STALE_PREFIXES = (".checkpoint.safetensors.", ".metrics.jsonl.", ".config.json.", ".model.tmp-", ".model.old-")


class RunFolderBusy(ValueError):
    """Another process holds the run folder's lock."""


def remove_stale(out: Path) -> list[str]:
    """Delete the temporary leftovers of killed writers in ``out``; return their names (sorted).

    Only call this while holding the folder's lock: a live writer's temporary files look the same.
    """
    removed = []
    for entry in sorted(Path(out).iterdir()):
        if entry.name.startswith(STALE_PREFIXES):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            removed.append(entry.name)
    return removed


@contextmanager
def hold_run_folder(out: Path, enabled: bool = True) -> Iterator[None]:
    """Hold the exclusive lock of the run folder ``out`` (created if missing) for the block.

    ``enabled=False`` (the other processes of a distributed run, which never write) does nothing.

    Raises:
        RunFolderBusy: another process holds the lock.
        OSError: the folder or its lock file cannot be created.
    """
    if not enabled:
        yield
        return
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusy(
                f"{str(out)!r} is being written by another process (it holds {LOCK}); wait for it to finish "
                "or choose another --out"
            ) from None
        remove_stale(out)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock
