"""One way into the probe: the settings of ``expattn probe`` travel from ``probe_to_dir`` to the records without
bouncing between files, and the defaults the CLI's help and ``expattn.probe`` state are ``ProbeConfig``'s.

The path of a ``ProbeConfig`` is counted with ``sys.settrace``: a call into a function of ``src/expattn`` is on the
path when the new frame holds the config (as an argument, in a list of configs, a closure or ``self``), or when its
caller holds it, the calling statement names it (it passes the config or a field read from it) and the function
takes an argument besides ``self`` (a property read on the way, such as ``subject.dtype``, receives nothing). The
files of those calls, in call order with consecutive repeats merged, are the path; a re-entry is a file that appears
in it again after another.
"""

from __future__ import annotations

import ast
import inspect
import re
import sys
from functools import cache
from pathlib import Path

import typer
from tiny_models import save_tiny

from expattn.cli import app
from expattn.commands.probe import probe_to_dir
from expattn.probes.api import probe as api_probe
from expattn.probes.budgets import default_tokens
from expattn.probes.config import DEFAULTS, ProbeConfig
from expattn.probes.models.loading import BUILTIN_MODELS

SRC = str(Path(__file__).resolve().parents[2] / "src" / "expattn") + "/"
# merged file visits on main before the probe's entry was folded into ``load`` (see the module docstring): 14
MOST_REENTRIES = 9


@cache
def _statements(filename: str) -> tuple[tuple[int, int, frozenset[str]], ...]:
    """Every simple statement (and the header of every compound one) of a file: its lines and the names it reads."""
    spans = []
    for node in ast.walk(ast.parse(Path(filename).read_text(encoding="utf-8"))):
        if isinstance(node, ast.If | ast.While):
            parts = [node.test]
        elif isinstance(node, ast.For):
            parts = [node.iter]
        elif isinstance(node, ast.With):
            parts = [item.context_expr for item in node.items]
        elif isinstance(node, ast.stmt) and not hasattr(node, "body"):
            parts = [node]
        else:
            parts = []
        spans += [(p.lineno, p.end_lineno, frozenset(n.id for n in ast.walk(p) if isinstance(n, ast.Name)))
                  for p in parts]
    return tuple(spans)


def _names_at(filename: str, line: int) -> frozenset[str]:
    """The names read by the innermost statement of ``filename`` that spans ``line``."""
    spans = [s for s in _statements(filename) if s[0] <= line <= s[1]]
    return min(spans, key=lambda s: s[1] - s[0])[2] if spans else frozenset()


def config_path(config: ProbeConfig, run) -> list[tuple[str, list[str]]]:
    """``run()`` traced: the files (relative to ``src/expattn``) that ``config`` passes through, each with the
    functions called there, consecutive calls in one file merged (see the module docstring)."""
    calls: list[tuple[str, str]] = []

    def holders(frame) -> set[str]:
        return {name for name, value in frame.f_locals.items()
                if value is config or (isinstance(value, list | tuple) and any(v is config for v in value))}

    def tracer(frame, event, arg):
        code = frame.f_code
        comprehension = code.co_name.startswith("<") and code.co_name != "<lambda>"
        if event != "call" or not code.co_filename.startswith(SRC) or comprehension:
            return None
        caller = frame.f_back
        receives = code.co_argcount + code.co_kwonlyargcount > (code.co_varnames[:1] == ("self",))
        on_path = bool(holders(frame)) or (receives and caller is not None and caller.f_code.co_filename.startswith(
            SRC) and bool(holders(caller) & _names_at(caller.f_code.co_filename, caller.f_lineno)))
        if on_path:
            calls.append((code.co_filename.removeprefix(SRC), code.co_name))
        return None

    sys.settrace(tracer)
    try:
        run()
    finally:
        sys.settrace(None)
    path: list[tuple[str, list[str]]] = []
    for filename, name in calls:
        if path and path[-1][0] == filename:
            path[-1][1].append(name)
        else:
            path.append((filename, [name]))
    return path


def reentries(path: list[tuple[str, list[str]]]) -> int:
    files = [filename for filename, _ in path]
    return sum(filename in files[:k] for k, filename in enumerate(files))


def test_reentries_counts_a_file_seen_before_and_not_a_repeat():
    assert reentries([("a", ["f"]), ("b", ["g"]), ("a", ["h"]), ("c", ["i"]), ("b", ["j"])]) == 2
    assert reentries([("a", ["f", "g"]), ("b", ["h"])]) == 0


def test_the_config_reaches_the_records_with_few_reentries(tmp_path):
    folder = save_tiny("bert", tmp_path / "tiny-bert", seed=1, intermediate_size=48)
    config = ProbeConfig(model=str(folder), tokens=128, seq_len=32, batch_size=4, replicates=20, detail_sequences=2)
    path = config_path(config, lambda: probe_to_dir([config], tmp_path / "out"))
    shown = "\n".join(f"{filename}: {', '.join(names)}" for filename, names in path)
    assert path[0][0] == "commands/probe.py" and any(f == "probes/feeding.py" for f, _ in path), shown
    assert reentries(path) <= MOST_REENTRIES, shown


def test_the_probe_helps_brackets_are_probeconfigs_defaults():
    """The CLI states its defaults as text (its help imports no torch): each bracket against ``ProbeConfig``."""
    params = {p.name: p for p in typer.main.get_command(app).commands["probe"].params}
    shown = {name: re.search(r"\[([^\]]+)\]\.?$", p.help) for name, p in params.items() if p.help}
    shown = {name: m.group(1) for name, m in shown.items() if m}
    expected = {"model": DEFAULTS.model, "corpus": DEFAULTS.corpus, "seq_len": str(DEFAULTS.seq_len),
                "seed": str(DEFAULTS.seed), "statistics": DEFAULTS.statistics,
                "detail_sequences": f"{DEFAULTS.detail_sequences} or all", "hypotheses": "every one the probe has",
                "memory_budget": "free memory", "twin_inits": str(DEFAULTS.twin_inits)}
    budgets = shown.pop("tokens")
    assert shown == expected
    for model in BUILTIN_MODELS:  # each built-in model, then the other names of its group, then its budget
        group = rf"(?<![\w.-]){re.escape(model)}(?:, [\w.-]+| and [\w.-]+)* {default_tokens(model):,}\b"
        assert re.search(group, budgets), (model, budgets)
        assert model in params["model"].help, model
    assert budgets.startswith("the model's: ") and budgets.endswith(f", others {default_tokens('some/folder'):,}")
    assert default_tokens("gemma3") == default_tokens("smollm2")
    assert DEFAULTS.hypotheses is None and DEFAULTS.memory_budget is None  # None: every one; the free memory
    for name in [*expected, "tokens"]:
        assert params[name].default is None, name  # left out: left to ProbeConfig


def test_the_python_api_takes_probeconfigs_defaults():
    defaults = {name: p.default for name, p in inspect.signature(api_probe).parameters.items()}
    for name in ("seq_len", "batch_size", "replicates", "detail_sequences", "statistics", "hypotheses",
                 "memory_budget", "twin", "twin_inits"):
        assert defaults[name] == getattr(DEFAULTS, name), name
    assert ProbeConfig().batch_size == DEFAULTS.batch_size and ProbeConfig().tokens == default_tokens(DEFAULTS.model)
