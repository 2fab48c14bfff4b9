"""The package's shape: no import cycle, nothing imports the command line, one writer.

Imports are read from the source (every ``import`` statement, also inside functions), so a
cycle hidden in a function-level import is a cycle here too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bayesspec"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imports_of(path: Path, known: set[str]) -> set[str]:
    """The bayesspec modules a file imports (relative imports resolved; ``from P import
    name`` counts as importing P.name when that is a module, else P)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                root = ".".join(base + ([node.module] if node.module else []))
            else:
                root = node.module or ""
            targets = [f"{root}.{alias.name}" if f"{root}.{alias.name}" in known else root
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rsplit(".", 1)[0] if "." in target else ""
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, set(known)) for name, path in known.items()}


def test_the_import_graph_has_no_cycle():
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                cycle = stack[stack.index(target):] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_nothing_outside_the_command_line_imports_it():
    offenders = {name: sorted(t for t in targets if t.startswith("bayesspec.cli"))
                 for name, targets in graph().items()
                 if not name.startswith("bayesspec.cli") and name != "bayesspec.__main__"}
    assert not {k: v for k, v in offenders.items() if v}


def test_one_atomic_writer():
    """Files are written through bayesspec.outputs only (no second temporary-file dance)."""
    writers = [module_name(p) for p in PACKAGE.rglob("*.py")
               if "mkstemp" in p.read_text() and module_name(p) != "bayesspec.outputs"]
    assert writers == []


def test_leaf_modules_stay_leaves():
    """The modules everything may import import no other part of bayesspec beyond these."""
    edges = graph()
    leaves = {"bayesspec.errors": set(), "bayesspec.uncertainty": set(),
              "bayesspec.data.schema": set(), "bayesspec.checks.ranks": set(),
              "bayesspec.outputs": {"bayesspec.data.schema"},
              "bayesspec.laws": set(),
              "bayesspec.prediction": {"bayesspec.errors", "bayesspec.laws"},
              "bayesspec.bayes.lazymodule": set(), "bayesspec.inference.compile_cache": set(),
              "bayesspec.inference.netcdf_read": set()}
    for leaf, allowed in leaves.items():
        assert edges[leaf] <= allowed, (leaf, edges[leaf] - allowed)
