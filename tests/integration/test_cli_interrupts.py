"""What the CLI says when it is stopped (Ctrl-C) or a report fails (exit 1): one line on stderr each."""

from __future__ import annotations

from typer.testing import CliRunner

from expattn.cli import app
from expattn.commands.report import ReportResult
from expattn.report.document import Stage


def _interrupted(*args, **kwargs):
    raise KeyboardInterrupt


def test_ctrl_c_prints_one_line_and_exits_130(tmp_path, monkeypatch):
    import expattn.commands.verify as verify

    monkeypatch.setattr(verify, "run_verify", _interrupted)  # Ctrl-C while the checks run
    result = CliRunner().invoke(app, ["verify", "--json", str(tmp_path / "r.json")])
    said = "interrupted; no partial output left (what was finished is kept)"
    assert result.exit_code == 130 and result.output.strip() == said
    assert list(tmp_path.iterdir()) == []


def test_a_report_that_exits_1_says_why_on_stderr(tmp_path, monkeypatch):
    import expattn.commands.report as report

    died = Stage("probe m", "fail", None, 0, "worker died (signal 9); re-ran alone; worker died (signal 9) again")
    monkeypatch.setattr(report, "run_report", lambda config, console: ReportResult([], [died], config.out_dir))
    result = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "r"), "--stages", "probe"])
    assert result.exit_code == 1
    why = [line for line in result.stderr.splitlines() if line.startswith("report: exit 1")]
    assert why == [f"report: exit 1: stage probe m failed ({died.reason})"]


def test_an_ok_report_says_nothing_on_stderr(tmp_path, monkeypatch):
    """Control: the same path with nothing failed exits 0 and is silent on stderr."""
    import expattn.commands.report as report

    fine = Stage("probe m", "ok", None, 0, "")
    monkeypatch.setattr(report, "run_report", lambda config, console: ReportResult([], [fine], config.out_dir))
    result = CliRunner().invoke(app, ["report", "--out", str(tmp_path / "r"), "--stages", "probe"])
    assert result.exit_code == 0 and result.stderr == ""
