"""A full disk leaves nothing behind: a results file that cannot be written takes its timings file with it.

The disk is filled by a stand-in for the atomic JSON writer that raises ``ENOSPC`` for the results file (the
timings file, written first, fits), as a small tmpfs does once the first file has taken its space; mounting one
needs privileges that a test machine may not give.
"""

from __future__ import annotations

import errno

import pytest
from typer.testing import CliRunner

from expattn.cli import app
from expattn.results import timings
from expattn.results.files import write_json_atomic


@pytest.fixture
def full_after_timings(monkeypatch):
    """``write_json_atomic`` writes a ``*timings.json`` and raises ENOSPC for anything else."""

    def write(path, document):
        if str(path).endswith("timings.json"):
            return write_json_atomic(path, document)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(timings, "write_json_atomic", write)


def test_a_results_file_that_does_not_fit_leaves_no_timings_file(tmp_path, full_after_timings):
    with pytest.raises(OSError, match="No space left"):
        timings.write_results(tmp_path / "r.json", {"records": [], "timings": {"A3": {"seconds": 1.0}}})
    assert list(tmp_path.iterdir()) == []


def test_an_older_timings_file_is_kept_when_the_new_results_do_not_fit(tmp_path, full_after_timings):
    """Only a file this write created is removed: an earlier run's files stay as they were found."""
    (tmp_path / "r.timings.json").write_text("{}")
    with pytest.raises(OSError):
        timings.write_results(tmp_path / "r.json", {"records": [], "timings": {"A3": {"seconds": 1.0}}})
    assert [p.name for p in tmp_path.iterdir()] == ["r.timings.json"]


def test_verify_json_on_a_full_disk_is_one_line_and_leaves_nothing(tmp_path, full_after_timings):
    result = CliRunner().invoke(app, ["verify", "--only", "A3", "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.output and "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_folder_output_that_does_not_fit_leaves_neither_folder_nor_staging(tmp_path, full_after_timings):
    """simulate, probe, report and train write their folders through ``staged``: a results file that does not fit
    inside the staging folder takes the whole staging folder with it, and the target is never created."""
    from expattn.results.files import staged

    out = tmp_path / "out"
    with pytest.raises(OSError, match="No space left"), staged(out) as staging:
        (staging / "plot.png").write_bytes(b"png")
        timings.write_results(staging, {"records": [], "seconds": 1.0})
    assert list(tmp_path.iterdir()) == []
