"""The one rule for where a command may write, and the one way it writes there.

The rule, the same for every command (``probe``, ``simulate``, ``report``, ``train``, ``verify --json``):

- an output folder is written when it is missing or empty (a ``.lock`` left by an earlier run
  counts as empty); a folder that holds anything else is refused unless ``--overwrite`` is given:
  then the command's outputs replace the files and subfolders of the same names and everything
  else in the folder is kept (``train --resume`` instead continues the run its folder holds);
- an output file (``verify --json FILE``) is written when it does not exist; an existing one is
  refused unless ``--overwrite``;
- one writer at a time: the writer holds the output's lock (``expattn.results.lock``) from its
  second look at the rule until it has published, and a second writer gets ``OutputBusy``.

``output_folder`` puts the three together with staged publishing (``expattn.results.files``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from expattn.results.files import staged
from expattn.results.lock import LOCK, hold_output, hold_output_file

SHOWN = 3  # entries named in a refusal


def check_output_folder(out: Path, overwrite: bool, flag: str = "--overwrite") -> None:
    """Raise ``ValueError`` when the rule refuses to write into ``out`` (see the module docstring).

    Args:
        out: the output folder.
        overwrite: the user asked to write into a non-empty folder.
        flag: how the user says ``overwrite`` (a CLI flag, or an argument of the Python API).
    """
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise ValueError(f"output folder {str(out)!r} exists and is not a folder")
    if overwrite or not out.is_dir():
        return
    held = sorted(e.name for e in out.iterdir() if e.name != LOCK)
    if held:
        listing = ", ".join(held[:SHOWN]) + (f" and {len(held) - SHOWN} more" if len(held) > SHOWN else "")
        raise ValueError(
            f"output folder {str(out)!r} already exists and is not empty (it holds {listing}); pass {flag} to "
            "write into it (files of the same names are replaced, others kept) or choose another folder"
        )


def check_output_file(path: Path, overwrite: bool, flag: str = "--overwrite") -> None:
    """Raise ``ValueError`` when the rule refuses to write the file ``path``."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise ValueError(f"output file {str(path)!r} is a folder")
    if path.exists() and not overwrite:
        raise ValueError(f"output file {str(path)!r} already exists; pass {flag} to replace it")


@contextmanager
def output_folder(out: str | os.PathLike, *, overwrite: bool = False, flag: str = "--overwrite") -> Iterator[Path]:
    """Check the rule, take the lock, check again, and yield a staging folder merged into ``out`` on success.

    Raises:
        ValueError: the rule refuses ``out``; ``OutputBusy`` (a ``ValueError``): another writer holds it.
        OSError: ``out`` cannot be written.
    """
    out = Path(out).expanduser()
    check_output_folder(out, overwrite, flag)  # before the lock creates anything
    with hold_output(out):
        check_output_folder(out, overwrite, flag)  # again: another writer may have published meanwhile
        with staged(out, merge=True) as staging:
            yield staging


@contextmanager
def output_file(path: str | os.PathLike, *, overwrite: bool = False, flag: str = "--overwrite") -> Iterator[Path]:
    """Check the rule for the file ``path``, hold its lock and check again; yield ``path`` to write (atomically)."""
    path = Path(path).expanduser()
    check_output_file(path, overwrite, flag)
    path.parent.mkdir(parents=True, exist_ok=True)
    with hold_output_file(path):
        check_output_file(path, overwrite, flag)
        yield path
