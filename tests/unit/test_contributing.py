"""``docs/CONTRIBUTING.md`` stays true: every file or folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def named_paths(text: str) -> list[str]:
    """The repository paths in backticks: ``src/...``, ``tests/...``, ``benchmarks/...``, ``docs/...``."""
    return [p for p in re.findall(r"`((?:src|tests|benchmarks|docs|scripts)/[^`\s]*)`", text) if "<" not in p]


def test_every_path_in_contributing_exists():
    paths = named_paths((ROOT / "docs" / "CONTRIBUTING.md").read_text())
    assert len(paths) >= 15
    missing = [p for p in paths if "e10_name" not in p and "figures_name" not in p and not (ROOT / p).exists()]
    assert not missing, missing


def test_named_paths_are_found():
    assert named_paths("see `src/a.py` and `tests/b/` but not `x.py` or `src/presets/<id>.py`") == ["src/a.py",
                                                                                                  "tests/b/"]
