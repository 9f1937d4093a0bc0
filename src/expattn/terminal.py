"""Terminal output through rich with every user string taken literally, so brackets in a path never read as markup.

``error(message)`` prints ``error: message`` in one line on stderr and exits with code 2;
``say(console, message)`` prints an informational line as plain text; ``plain(text)`` escapes
one user string for use inside a markup string (table titles, progress descriptions).
``interrupt_on_sigterm()`` makes SIGTERM end a command the way Ctrl-C does (cleaning up on the way
out), with the shell's exit status of each: 128 + 15 = 143 for SIGTERM, 128 + 2 = 130 for Ctrl-C.
"""

from __future__ import annotations

import re
import signal
import threading
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

# What rich's markup parser reads as a tag, with the backslashes before it (rich.markup's own pattern).
_TAG = re.compile(r"(\\*)(\[[a-z#/@][^[]*?])")


def plain(text: object) -> str:
    """``str(text)`` with every would-be tag escaped: rendered as markup it prints exactly as written.

    Unlike ``rich.markup.escape`` a trailing backslash stays single, so the result must not be
    followed directly by a tag of the surrounding markup.
    """
    return _TAG.sub(lambda m: f"{m[1]}{m[1]}\\{m[2]}", str(text))


def say(console: Console, message: str) -> None:
    """Print ``message`` verbatim (no markup, emoji codes or highlighting) on ``console``."""
    console.print(Text(message), highlight=False, soft_wrap=True)


def error(message: str) -> NoReturn:
    """Print a one-line red ``error:`` followed by ``message`` verbatim on stderr, then exit with code 2."""
    line = " ".join(str(message).splitlines()) or "failed"
    Console(stderr=True).print(Text.assemble(("error:", "bold red"), " ", line), highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _terminate(signum: int, frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def interrupt_on_sigterm() -> None:
    """Handle SIGTERM like SIGINT: raise ``SystemExit(143)`` in the main thread, which unwinds like the
    ``KeyboardInterrupt`` of Ctrl-C (exit status 130), so every staging folder and temporary file is
    removed on the way out (``expattn.results.files``) and locks are released."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
