"""Every user string printed through rich appears verbatim: markup, emoji codes and brackets are not interpreted."""

from __future__ import annotations

import io

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from rich.table import Table

from expattn.terminal import error, plain, say

# Printable text without line breaks or control characters (the terminal itself would act on those).
TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), min_size=1, max_size=60)
HOSTILE = ["runs/[/]x", "a[/]b.txt", "[bold]x", "[red]", "\\", "x\\", "[/]\\", "[link=file:///]z[/link]", ":smile:",
           "mm$\\bad{$", "[[/]]", "\\[/]"]


def _console() -> tuple[Console, io.StringIO]:
    sink = io.StringIO()
    return Console(file=sink, width=400, color_system=None, force_terminal=False), sink


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(TEXT)
def test_error_prints_the_message_verbatim_and_exits_2(capsys, text):
    with pytest.raises(typer.Exit) as exc:
        error(text)
    assert exc.value.exit_code == 2
    assert capsys.readouterr().err == f"error: {text}\n"


@pytest.mark.parametrize("text", HOSTILE)
def test_error_hostile_examples(capsys, text):
    with pytest.raises(typer.Exit):
        error(f"output folder {text!r} cannot be written")
    assert capsys.readouterr().err == f"error: output folder {text!r} cannot be written\n"


def test_error_is_one_line(capsys):
    with pytest.raises(typer.Exit):
        error("first\nsecond [/]")
    assert capsys.readouterr().err == "error: first second [/]\n"


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_say_prints_verbatim(text):
    console, sink = _console()
    say(console, f"results in {text}/results.json")
    assert sink.getvalue() == f"results in {text}/results.json\n"


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), blacklist_characters=":"), max_size=40))
def test_plain_inside_markup_survives(text):
    console, sink = _console()
    console.print(f"[bold]probe[/] {plain(text)}", soft_wrap=True, highlight=False)
    assert sink.getvalue() == f"probe {text}\n"
    table = Table(title=f"expattn probe --model {plain(text)}")
    table.add_column("x")
    table.add_row(plain(text))
    console.print(table)  # renders without MarkupError
