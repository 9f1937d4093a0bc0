"""User text files read with a size limit: a regular file of at most ``MAX_TEXT_BYTES``, read in chunks.

A device or a pipe (``/dev/zero``, ``/dev/stdin``) is refused at once instead of being read forever,
and a file larger than the limit before any of it is read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_TEXT_BYTES = 2**30
CHUNK = 2**22


def read_text_limited(path: str | os.PathLike, limit: int = MAX_TEXT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``limit`` bytes.

    Raises:
        ValueError: ``path`` is not a regular file, or holds more than ``limit`` bytes.
        OSError: it cannot be opened or read; UnicodeDecodeError: it is not UTF-8.
    """
    path = Path(path)
    info = path.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{str(path)!r} is not a regular file (a device, a pipe or a socket cannot be read as text)")
    if info.st_size > limit:
        raise ValueError(f"{str(path)!r} holds {info.st_size:,} bytes, more than the limit of {limit:,} bytes")
    chunks, size = [], 0
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            size += len(chunk)
            if size > limit:  # it grew while being read
                raise ValueError(f"{str(path)!r} holds more than the limit of {limit:,} bytes")
            chunks.append(chunk)
    return b"".join(chunks).decode("utf-8")
