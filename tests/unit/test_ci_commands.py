"""CI runs exactly the README's two commands: the test command, then the main job."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readmes_test_command_then_its_main_command():
    main, tests = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)[:2]
    assert "expattn report" in main and "pytest" in tests
    commands = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
                if line and not line.startswith(("#", "set ", "cd "))]
    assert commands == [tests, main]
