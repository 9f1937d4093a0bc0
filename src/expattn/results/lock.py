"""One writer per output: an OS file lock held for the whole run, and leftovers of killed writers removed.

``hold_output(out)`` takes an exclusive ``fcntl.flock`` on ``out/.lock`` (``out`` created if missing;
the kernel releases the lock when the process exits in any way, SIGKILL included, so a lock is never
stale) and, holding it, removes what a killed writer of ``out`` left behind (``remove_stale``):

- beside ``out``: its staging folders ``.{out}.tmp-*`` and swapped-out copies ``.{out}.old-*``
  (``expattn.results.files.staging_dir`` / ``replace_dir``);
- inside ``out``: atomic writes cut before their rename (``.results.json.*``, ``.checkpoint.safetensors.*``,
  ...) and subfolder swaps cut half-way (``.model.tmp-*``, ``.plots.old-*``).

A second process that asks for the lock while it is held gets ``OutputBusy`` at once instead of
waiting. ``hold_output_file(path)`` is the same lock for a single output file: ``.{path}.lock`` beside
it. A lock file is removed when released (one left by a killed writer is harmless: the next writer
takes it), and so is a folder the lock created if nothing was published into it: a refused or failed
run leaves nothing behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

LOCK = ".lock"
_TRIES = 5
# ``tempfile``'s random part: 8 characters of this alphabet.
_RANDOM = r"[a-z0-9_]{8}"
# Temporary siblings of what a run writes inside its folder (``write_bytes_atomic``, ``staged``).
_STALE_INSIDE = re.compile(rf"\..+\.(json|jsonl|safetensors|csv|md|html|png)\.{_RANDOM}|\..+\.(tmp|old)-{_RANDOM}")


class OutputBusy(ValueError):
    """Another process holds the output's lock."""


def _stale_beside(out: Path) -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(out.name)}\.(tmp|old)-{_RANDOM}")


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def remove_stale(out: Path) -> list[str]:
    """Delete the leftovers of killed writers of ``out`` (inside it and beside it); return their paths (sorted).

    Only call this while holding the folder's lock: a live writer's temporary files look the same.
    """
    out = Path(out)
    beside = _stale_beside(out)
    found = [e for e in out.parent.iterdir() if beside.fullmatch(e.name)]
    if out.is_dir():
        found += [e for e in out.iterdir() if _STALE_INSIDE.fullmatch(e.name)]
    for entry in found:
        _remove(entry)
    return sorted(str(e) for e in found)


@contextmanager
def _locked(lock: Path, what: str) -> Iterator[None]:
    """Hold ``flock(LOCK_EX)`` on the file ``lock`` (created if missing, removed on release), or raise ``OutputBusy``.

    A holder removes the file on release, so the lock taken must be on the file that ``lock`` names
    now: one taken on a file removed between our ``open`` and our ``flock`` is let go and taken again.
    """
    for _ in range(_TRIES):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except OSError as err:
            raise OSError(f"{what} cannot be written: {err.strerror or err}") from err
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise OutputBusy(
                f"{what} is being written by another process (it holds {lock.name}); wait for it to finish "
                "or choose another output"
            ) from None
        try:
            if lock.exists() and os.fstat(fd).st_ino == os.stat(lock).st_ino:
                try:
                    yield
                finally:
                    lock.unlink(missing_ok=True)  # before the release: the next writer's open makes a new one
                return
        finally:
            os.close(fd)  # closing the only descriptor releases the lock
    raise OutputBusy(f"{what} is being written by other processes (its lock changed {_TRIES} times while taken)")


@contextmanager
def hold_output(out: Path, enabled: bool = True) -> Iterator[None]:
    """Hold the exclusive lock of the output folder ``out`` (created if missing) for the block.

    ``enabled=False`` (the other processes of a distributed run, which never write) does nothing.
    A folder created here that is empty at the end is removed.

    Raises:
        OutputBusy: another process holds the lock.
        OSError: the folder or its lock file cannot be created.
    """
    if not enabled:
        yield
        return
    out = Path(out).expanduser()
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(f"output folder {str(out)!r} cannot be written: {err.strerror or err}") from err
    try:
        with _locked(out / LOCK, repr(str(out))):
            remove_stale(out)
            yield
    finally:
        if created and out.is_dir() and not any(out.iterdir()):
            with suppress(OSError):  # another writer has just made its lock in it
                out.rmdir()


@contextmanager
def hold_output_file(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of the output file ``path`` (``.{name}.lock`` beside it) for the block.

    Raises:
        OutputBusy: another process holds the lock.
        OSError: the lock file cannot be created.
    """
    path = Path(path).expanduser()
    lock = path.parent / f".{path.name}{LOCK}"
    with _locked(lock, repr(str(path))):
        yield
