"""Help texts: square brackets shown as written (no markup swallows "[layernorm]" or "[yes]"), and the
valid choices of registries and fixed vocabularies named in the options that take them."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from expattn.cli import app
from expattn.commands.report_config import STAGES
from expattn.dynamics.clouds import CLOUD_KINDS
from expattn.dynamics.operators import CARRIERS
from expattn.nn.carriers import carrier_names
from expattn.nn.norms import norm_names

COMMANDS = ("verify", "simulate", "probe", "train", "report")


def help_text(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def option_help(command: str, name: str) -> str:
    group = typer.main.get_command(app)
    [param] = [p for p in group.commands[command].params if p.name == name]
    return param.help


@pytest.mark.parametrize("command", COMMANDS)
def test_brackets_show_as_written(command):
    shown = help_text(command)
    group = typer.main.get_command(app)
    brackets = [b for p in group.commands[command].params for b in re.findall(r"\[[^\]]*\]", p.help or "")]
    for bracket in brackets:
        assert " ".join(bracket.split()) in shown, bracket


def test_simulate_help_keeps_defaults_in_brackets():
    shown = help_text("simulate")
    assert "[layernorm]" in shown and "[yes]" in shown and "[the cloud]" in shown


@pytest.mark.parametrize(("command", "option", "choices"), [
    ("train", "carrier", carrier_names()),
    ("train", "norm", norm_names()),
    ("simulate", "norm", norm_names()),
    ("simulate", "carrier", CARRIERS),
    ("simulate", "cloud", CLOUD_KINDS),
    ("report", "stages", STAGES),
    ("train", "dtype", ("float32", "bfloat16", "float16")),
    ("probe", "dtype", ("float32", "bfloat16", "float16")),
])
def test_help_names_the_choices(command, option, choices):
    text = option_help(command, option)
    missing = [c for c in choices if not re.search(rf"\b{re.escape(c)}\b", text)]
    assert not missing, f"{command} --{option} help does not name {missing}: {text!r}"
