"""Assertions shared by the CLI tests."""

from __future__ import annotations


def one_line_error(result, *fragments: str) -> None:
    """``result`` (typer's CliRunner) ended in exit code 2 with one ``error:`` line holding every fragment."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert all(f in lines[0] for f in fragments), result.output
