"""Every public function and method of ``expattn.probes`` that takes or returns a tensor says its shape.

The modules are read with ``ast``, not imported: a parameter or return annotated as a plain ``Tensor`` (or
``torch.Tensor``, alone or in a union such as ``Tensor | None``) has no shape and fails the test; jaxtyping's
``Float[Tensor, "heads head_dim dim"]`` and friends pass. Containers (``dict[str, Tensor]``, tuples, lists) and
modules may keep their types: only a bare tensor counts as missing a shape.
"""

from __future__ import annotations

import ast
from pathlib import Path

import expattn.probes

PROBES = Path(expattn.probes.__file__).parent


def _bare(node: ast.expr | None) -> bool:
    """A plain tensor annotation: ``Tensor``, ``torch.Tensor``, or a ``|`` union holding one."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        node = ast.parse(node.value, mode="eval").body
    if isinstance(node, ast.Name):
        return node.id == "Tensor"
    if isinstance(node, ast.Attribute):
        return node.attr == "Tensor"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _bare(node.left) or _bare(node.right)
    return False


def _functions(body: list[ast.stmt], prefix: str = ""):
    """Module-level functions and the methods of classes (nested classes too), with their dotted names."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + node.name, node
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, f"{prefix}{node.name}.")


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _unshaped(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x is not None)]
    missing = [p.arg for p in params if _bare(p.annotation)]
    return [*missing, "return"] if _bare(fn.returns) else missing


def _walk() -> dict[str, list[str]]:
    """``module:line name -> [unshaped parameters]`` over every public probes function with a bare tensor."""
    found = {}
    for path in sorted(PROBES.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, fn in _functions(tree.body):
            if _public(name) and (missing := _unshaped(fn)):
                found[f"{path.relative_to(PROBES)}:{fn.lineno} {name}"] = missing
    return found


def test_the_walk_sees_the_probes_package():
    modules = list(PROBES.rglob("*.py"))
    assert len(modules) > 20 and any(p.parent.name == "hypotheses" for p in modules)


def test_the_checker_tells_bare_from_shaped():
    src = (
        "def a(x: Tensor) -> int: ...\n"
        "def b(x: 'Float[Tensor, \"n d\"]') -> Float[Tensor, 'n']: ...\n"
        "def c(x: dict[str, Tensor], y: tuple[Tensor, Tensor]) -> torch.Tensor | None: ...\n"
        "def _d(x: Tensor) -> Tensor: ...\n"
    )
    fns = dict(_functions(ast.parse(src).body))
    assert _unshaped(fns["a"]) == ["x"]
    assert _unshaped(fns["b"]) == []
    assert _unshaped(fns["c"]) == ["return"]
    assert not _public("_d") and not _public("Tap._kernel") and not _public("_Private.method")


def test_public_probe_functions_annotate_tensor_shapes():
    found = _walk()
    listing = "\n".join(f"  {where}: {', '.join(params)}" for where, params in found.items())
    assert not found, f"{len(found)} public probes functions take or return a tensor with no shape:\n{listing}"
