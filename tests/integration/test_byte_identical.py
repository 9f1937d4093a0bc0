"""Two runs at one seed write the same ``results.json``, byte for byte; the wall clock goes to ``timings.json``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from expattn.cli import app
from expattn.results.timings import read_document

# the three quickest of simulate --quick, and the two that once measured CPU time (their cost is now counted in
# evaluations of the update, which a seed fixes)
FAST_PRESETS = "d2-fixed-vs-changing,d2-one-step-error,b3-expansion,d7-hopfield,d7-attention"


def _twice(tmp_path, *args: str) -> tuple[bytes, bytes]:
    for name in ("a", "b"):
        result = CliRunner().invoke(app, [*args, "--seed", "0", "--out", str(tmp_path / name)])
        assert result.exit_code in (0, 1), result.output  # 1: a verdict that is not ok, still written
    return tuple((tmp_path / name / "results.json").read_bytes() for name in ("a", "b"))


def test_simulate_twice_is_byte_identical(tmp_path):
    first, again = _twice(tmp_path, "simulate", "--quick", "--only", FAST_PRESETS)
    assert first == again
    clock = json.loads((tmp_path / "a" / "timings.json").read_text())
    assert sorted(clock["timings"]) == sorted(FAST_PRESETS.split(",")) and "timings" not in json.loads(first)
    assert read_document(tmp_path / "a" / "results.json")["timings"] == clock["timings"]  # joined back for readers


@pytest.mark.slow
def test_probe_twice_is_byte_identical(tmp_path):
    first, again = _twice(tmp_path, "probe", "--model", "minilm", "--tokens", "512", "--seq-len", "64",
                          "--detail-sequences", "2")
    assert first == again
    assert {"seconds", "forward_seconds", "timings"} <= set(json.loads((tmp_path / "a" / "timings.json").read_text()))
