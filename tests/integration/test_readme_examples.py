"""The Python examples of the README and of docs/USAGE.md run as written, each on its own (a user copies one block
into a fresh session), and the run times they quote are measurements that the command line's help repeats."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README, USAGE = ROOT / "README.md", ROOT / "docs" / "USAGE.md"


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every fenced ```python block of ``text``, ``line`` the first line of its code."""
    return [(text.count("\n", 0, m.start(1)) + 1, m.group(1)) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


def run_alone(line: int, code: str, source: Path = README) -> dict[str, object]:
    """``code`` executed in a fresh namespace, its tracebacks pointing at ``source``'s lines."""
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec(compile("\n" * (line - 1) + code, str(source), "exec"), namespace)  # our own docs, not user input
    return namespace


def test_readme_python_blocks_each_run_in_a_fresh_namespace():
    quick = [run_alone(line, code) for line, code in python_blocks(README.read_text())]
    assert len(quick) >= 2
    assert quick[0]["out"].shape == (2, 4, 8) and quick[0]["step"].shape == (3, 32, 64)
    assert next(space for space in quick if "found" in space)["found"].verdicts["E5"] == "pass"


def test_usage_python_blocks_each_run_in_a_fresh_namespace():
    blocks = python_blocks(USAGE.read_text())
    assert len(blocks) >= 6
    spaces = [run_alone(line, code, USAGE) for line, code in blocks]

    def defining(name: str) -> dict[str, object]:
        return next(space for space in spaces if name in space)

    assert defining("out")["out"].shape == (2, 4, 8)
    attention = defining("x_next")
    assert attention["x_next"].shape == (4, 128, 512)
    # read after the block's last call, as a user reads them: that call's weights and log-normalizers
    assert attention["attn"].last_weights.shape == (4, 8, 128, 128)
    assert attention["attn"].last_log_normalizer.shape == (4, 8, 128)
    energy = defining("res")["res"].energy
    # never rises, up to float32 rounding of energies of size |E| (relative eps 1.2e-7, a few ops)
    assert energy.diff(dim=0).max() <= 1e-6 * energy.abs().max()
    assert defining("results")["results"].verdicts["E5"] == "pass"  # the probe example on MiniLM


def test_python_blocks_are_found_with_their_lines():
    text = "intro\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = 2\nz = 3\n```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (9, "y = 2\nz = 3\n")]


def test_quoted_run_times_are_measurements_the_help_does_not_repeat():
    import typer

    from expattn.cli import app

    text = " ".join(README.read_text().split())
    quick = re.search(r"`expattn report --quick` took (\d+(?:-\d+)?) s wall and (\d+(?:-\d+)?) CPU-seconds", text)
    assert quick is not None
    report = next(p for p in typer.main.get_command(app).commands["report"].params if p.name == "quick")
    assert not re.search(r"\d+ s\b|CPU-seconds", report.help), report.help  # timings: benchmarks/README.md
    usage = " ".join(USAGE.read_text().split())
    verify = next(row for row in usage.split(" | ") if row.startswith("every exact identity"))
    assert re.search(r"`/usr/bin/time expattn verify`.*\d+(\.\d)?-\d+(\.\d)? CPU-seconds", verify), verify
