"""The README's Python examples run as written (a user copies them first)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    namespace: dict[str, object] = {}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)  # our own README, not user input
    assert namespace["out"].shape == (2, 4, 8)
    assert namespace["x_next"].shape == (4, 128, 512)
    energy = namespace["res"].energy
    # never rises, up to float32 rounding of energies of size |E| (relative eps 1.2e-7, a few ops)
    assert energy.diff(dim=0).max() <= 1e-6 * energy.abs().max()
    assert namespace["results"].verdicts["E5"] == "pass"  # the probe example on MiniLM
