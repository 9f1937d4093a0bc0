"""The ground floor stays data: no package below the commands imports ``checks``, ``presets`` or ``probes`` (by
name or through ``importlib``), and the command layer names every module that registers checks."""

from __future__ import annotations

import ast
from pathlib import Path

from expattn.commands.checks import CHECK_MODULES, PRESET_MODULES

SRC = Path(__file__).resolve().parents[2] / "src" / "expattn"
UPPER = ("checks", "presets", "probes")
# who may import them: the command layer, the CLI, the public facade (``expattn/__init__.py``, which loads
# ``expattn.probe`` on first use), and each of them its own package (presets reuse checks' draws)
ALLOWED = {"commands": UPPER, "cli.py": UPPER, "__init__.py": UPPER, "checks": ("checks",),
           "presets": ("checks", "presets"), "probes": ("probes",)}


def _imported(path: Path) -> set[str]:
    """Top-level ``expattn`` sub-packages that ``path`` imports, including strings given to ``importlib``."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("expattn."):
            names = [node.value]
        found |= {n.split(".")[1] for n in names if n.startswith("expattn.") and n.count(".") >= 1}
    return found


def test_no_module_below_the_commands_imports_checks_presets_or_probes():
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        top = path.relative_to(SRC).parts[0]
        allowed = ALLOWED.get(top, ())
        offenders += [f"{path.relative_to(SRC)} -> {p}" for p in _imported(path) & set(UPPER) if p not in allowed]
    assert offenders == []


def test_the_scan_sees_an_import_by_name_and_through_importlib(tmp_path):
    # the negative control: a module that does both is caught
    bad = tmp_path / "bad.py"
    bad.write_text('import importlib\nfrom expattn.probes import runner\nimportlib.import_module("expattn.checks")\n')
    assert _imported(bad) >= {"probes", "checks"}


def test_every_module_that_registers_checks_is_named():
    named = {m.__name__.rsplit(".", 1)[1] for m in (*CHECK_MODULES, *PRESET_MODULES)}
    registering = {p.stem for folder in ("checks", "presets") for p in (SRC / folder).glob("*.py")
                   if "@register_claim(" in (text := p.read_text(encoding="utf-8")) or "\n@register_preset\n" in text}
    assert registering == named
