"""Staged, atomic output: a reader never sees a partial file or folder, a crash leaves none behind.

Every command writes this way:

- a single file through a hidden temporary sibling and one ``os.replace`` (``write_bytes_atomic``,
  ``write_text_atomic``, ``write_json_atomic``);
- a folder of outputs into a hidden staging sibling (``staged``), published at the end either as a
  whole (``replace_dir``: the folder is swapped in one rename) or entry by entry into an existing
  folder (``merge_into``: each file or subfolder by one rename, ``results.json`` last, so a results
  file never points at plots that are not there yet).

Temporary names all start with ``.{name}.`` next to their target, so leftovers of a killed process
are recognisable: the next writer of that output removes them while it holds the output's lock
(``expattn.results.lock``). Where a command may write at all is ``expattn.results.outputs``.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

RESULTS = "results.json"


def _usual_permissions(path: Path) -> None:
    """Give ``path`` the permissions of an ordinary new file (``mkstemp`` makes it private, 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def write_bytes_atomic(path: str | os.PathLike, data: bytes, *, durable: bool = False) -> Path:
    """Write ``data`` to ``path`` through a temporary sibling and a rename: never a partial file.

    Args:
        path: the target file; its folder is created.
        data: the bytes.
        durable: ``fsync`` the file before the rename (checkpoints: survive a power cut).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        _usual_permissions(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """``write_bytes_atomic`` of UTF-8 text."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: str | os.PathLike, document: dict[str, Any]) -> Path:
    """``write_bytes_atomic`` of a JSON document (indented; NaN and infinities refused)."""
    return write_text_atomic(path, json.dumps(document, indent=1, allow_nan=False))


def staging_dir(out: Path) -> Path:
    """A new hidden folder beside ``out`` (same file system, so publishing is a rename).

    Raises:
        ValueError: ``out`` exists and is not a folder.
        OSError: ``out`` is not writable or its parent cannot be created (the message names ``out``).
    """
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"output folder {str(out)!r} exists and is not a folder")
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise OSError(f"output folder {str(out)!r} is not writable")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    except OSError as err:
        raise OSError(f"output folder {str(out)!r} cannot be written: {err.strerror or err}") from err


def replace_dir(staging: Path, out: Path) -> None:
    """Swap the finished ``staging`` folder in as ``out``; an existing ``out`` is removed after the swap."""
    out = Path(out).expanduser()
    if not out.exists():
        os.replace(staging, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(staging, out)
    shutil.rmtree(old, ignore_errors=True)


def merge_into(staging: Path, out: Path) -> None:
    """Move each entry of ``staging`` into ``out`` by one rename (a subfolder is swapped whole).

    ``results.json`` goes last. A missing ``out`` is simply the renamed ``staging``.
    """
    out = Path(out).expanduser()
    if not out.exists():
        os.replace(staging, out)
        return
    for entry in sorted(staging.iterdir(), key=lambda e: (e.name == RESULTS, e.name)):
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            replace_dir(entry, target)
        else:
            os.replace(entry, target)
    staging.rmdir()


@contextmanager
def staged(out: str | os.PathLike, *, merge: bool = False) -> Iterator[Path]:
    """Write a command's outputs into a staging folder, published to ``out`` only on success.

    ``merge=False`` replaces ``out`` whole (``replace_dir``); ``merge=True`` keeps what else ``out``
    holds (``merge_into``). On any exception, ``KeyboardInterrupt`` included, the staging folder is
    removed and nothing in ``out`` has changed.
    """
    out = Path(out).expanduser()
    staging = staging_dir(out)
    try:
        yield staging
        (merge_into if merge else replace_dir)(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise

