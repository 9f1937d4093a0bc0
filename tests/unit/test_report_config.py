"""The report's options in one place: the CLI's defaults are ``DEFAULTS``'s, ``jobs`` has one default, and the stages
import the config, not the command (no circle between ``report`` and ``report_stages``)."""

from __future__ import annotations

import ast
from pathlib import Path

import typer

from expattn.cli import app
from expattn.commands import report_stages
from expattn.commands.report_config import DEFAULTS, STAGES, ReportConfig


def _report_defaults() -> dict[str, object]:
    command = typer.main.get_command(app).commands["report"]
    return {p.name: p.default for p in command.params}


def test_the_cli_takes_the_report_defaults_from_the_config():
    cli = _report_defaults()
    assert Path(cli["out"]) == DEFAULTS.out_dir and cli["seed"] == DEFAULTS.seed
    assert tuple(cli["models"].split(",")) == DEFAULTS.models and tuple(cli["stages"].split(",")) == STAGES
    assert cli["jobs"] is DEFAULTS.jobs is None  # one default: one worker per torch thread, at most one per stage


def test_the_config_default_is_the_dataclass_default():
    assert ReportConfig() == DEFAULTS and DEFAULTS.stages == STAGES


def test_the_stages_do_not_import_the_report_command():
    tree = ast.parse(Path(report_stages.__file__).read_text(encoding="utf-8"))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "expattn.commands.report_config" in imported and "expattn.commands.report" not in imported
