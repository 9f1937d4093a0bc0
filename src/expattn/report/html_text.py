"""HTML text shared by the page's parts: escaping of every shown string and the coloured verdict badge."""

from __future__ import annotations

import html
from typing import Any


def esc(value: Any) -> str:
    """``html.escape`` of ``str(value)``, quotes included (safe in text and in attributes)."""
    return html.escape(str(value), quote=True)


def badge(verdict: str, href: str | None = None, text: str | None = None, title: str = "") -> str:
    """A coloured verdict badge, optionally a link to an anchor and with a tooltip."""
    css = esc(verdict.replace(" ", "-"))
    body = esc(text if text is not None else verdict)
    tip = f' title="{esc(title)}"' if title else ""
    if href is None:
        return f'<span class="badge {css}"{tip}>{body}</span>'
    return f'<a class="badge {css}" href="#{esc(href)}"{tip}>{body}</a>'
