"""The simulate presets' base class: sizes of both modes read in one place, draw only with an output folder,
registration from the class's own attributes, and every preset module short and free of inline quick/full
choices."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from expattn.catalogue import entry, registry
from expattn.catalogue.registry import RunContext
from expattn.presets.base import Preset, Sizes, register_preset
from expattn.results.record import Record

PRESETS = Path(__file__).resolve().parents[2] / "src" / "expattn" / "presets"
MAX_LINES = 60


class Toy(Preset):
    """Sums ``batch`` ones ``steps`` times; records which sizes it saw and whether it drew."""

    sizes = Sizes(quick=dict(batch=2, steps=3), full=dict(batch=5, steps=7))

    def __init__(self) -> None:
        self.seen, self.drawn = [], []

    def measure(self, ctx, n):
        self.seen.append((n.batch, n.steps))
        return {"total": n.batch * n.steps}

    def judge(self, measured):
        return Record(id="B2", kind="dynamics", verdict="pass", metrics={"total": measured["total"]})

    def draw(self, measured, out_dir):
        self.drawn.append(out_dir)
        return ["toy.png"]


def test_quick_and_full_sizes_come_from_the_declaration():
    toy = Toy()
    assert toy(RunContext(quick=True)).metrics == {"total": 6}
    assert toy(RunContext(quick=False)).metrics == {"total": 35}
    assert toy.seen == [(2, 3), (5, 7)]


def test_draw_only_with_an_output_folder(tmp_path):
    toy = Toy()
    assert toy(RunContext(out_dir=None)).plots == []
    assert toy.drawn == []
    assert toy(RunContext(out_dir=tmp_path)).plots == ["toy.png"]
    assert toy.drawn == [tmp_path]


def test_sizes_name_the_same_sizes_in_both_modes():
    with pytest.raises(ValueError, match="same sizes"):
        Sizes(quick=dict(batch=2), full=dict(batch=4, steps=9))


def _functions(path: Path):
    return [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _long_functions(folder: Path) -> list[str]:
    return [f"{p.relative_to(folder.parent)}:{f.name} ({f.end_lineno - f.lineno + 1} lines)"
            for p in sorted(folder.rglob("*.py")) for f in _functions(p) if f.end_lineno - f.lineno + 1 > MAX_LINES]


def test_no_preset_function_is_over_60_lines():
    assert not _long_functions(PRESETS), _long_functions(PRESETS)


@pytest.mark.parametrize("folder", ["probes", "commands"])
def test_no_probe_or_command_function_is_over_60_lines(folder):
    long = _long_functions(PRESETS.parent / folder)
    assert not long, long


def test_the_line_rule_finds_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text(f"def long():\n{body}\n", encoding="utf-8")
    assert _long_functions(tmp_path / "pkg") == [f"pkg/long.py:long ({MAX_LINES + 1} lines)"]


def _reads_quick(tree: ast.AST) -> list[int]:
    """Lines that read an attribute ``quick`` (``ctx.quick``) or choose with ``x if quick else y``."""
    lines = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "quick"
             and isinstance(n.ctx, ast.Load)]
    lines += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.IfExp | ast.If)
              and any(isinstance(m, ast.Name | ast.Attribute) and "quick" in ast.unparse(m) for m in ast.walk(n.test))]
    return sorted(lines)


def test_only_the_base_class_reads_quick():
    offenders = {p.name: _reads_quick(ast.parse(p.read_text())) for p in sorted(PRESETS.glob("*.py"))
                 if p.name != "base.py"}
    assert not {k: v for k, v in offenders.items() if v}, offenders
    assert _reads_quick(ast.parse((PRESETS / "base.py").read_text()))  # the one place that does


def test_the_check_finds_an_inline_choice():
    assert _reads_quick(ast.parse("n = (2, 3) if ctx.quick else (4, 5)"))
    assert _reads_quick(ast.parse("def f(quick):\n    if quick:\n        return 1"))
    assert not _reads_quick(ast.parse("n = sizes.pick(flag)"))


def test_every_simulate_check_is_a_registered_preset():
    """Each registered simulate check is an instance of a ``Preset`` subclass, registered with the claim, name,
    method and criterion its class states, and every ``Preset`` subclass of a preset module is registered."""
    from expattn.commands.checks import PRESET_MODULES, claims

    registered = claims("simulate")
    assert len(registered) >= 16
    for c in registered:
        assert isinstance(c.check, Preset), c.name
        preset = type(c.check)
        assert (c.id, c.name, c.method, c.criterion) == (preset.claim, preset.name, preset.method, preset.criterion)
        assert c.statement == (preset.statement or entry(c.id).statement), c.name
    defined = {cls for m in PRESET_MODULES for cls in vars(m).values()
               if isinstance(cls, type) and issubclass(cls, Preset) and cls.__module__ == m.__name__}
    assert defined == {type(c.check) for c in registered}


def test_register_preset_registers_the_class_attributes(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {})

    @register_preset
    class Named(Toy):
        claim, name, method, criterion = "b2", "toy-collapse", "sums ones", "pass iff the sum is positive"

    (claim,) = registry.registered("simulate")
    assert (claim.id, claim.name, claim.command) == ("B2", "toy-collapse", "simulate")
    assert (claim.method, claim.criterion, claim.kind) == ("sums ones", "pass iff the sum is positive", "dynamics")
    assert claim.statement == entry("B2").statement  # no statement of its own: the catalogue's
    assert isinstance(claim.check, Named) and claim.check(RunContext(quick=True)).metrics == {"total": 6}
    with pytest.raises(ValueError, match="already has a check named toy-collapse"):
        register_preset(Named)  # the same name twice is refused
    with pytest.raises(ValueError, match="unknown claim ID"):
        register_preset(type("Stray", (Named,), {"claim": "Z9", "name": "stray"}))


class Threads(Toy):
    """Records the intra-op thread count ``measure`` runs with."""

    def measure(self, ctx, n):
        self.seen.append(torch.get_num_threads())
        return {"total": 0}


def test_single_thread_runs_measure_on_one_thread_and_restores_the_count():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # a count a single-thread run must change and give back
    try:
        many = Threads()
        many(RunContext())
        one = type("OneThread", (Threads,), {"single_thread": True})()
        one(RunContext())
        assert (many.seen, one.seen, torch.get_num_threads()) == ([2], [1], 2)
    finally:
        torch.set_num_threads(before)
