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


#: The layers, lowest first: a module may import its own layer and the layers below it.
#: ARCHITECTURE.md tells what each owns.
LAYERS = (
    ("errors", "outputs", "uncertainty"),   # the root's helpers, importing nothing above
    ("laws",),                             # formulas: numpy and PyTensor algebra
    ("data", "datasets"),                  # the tidy table, catalog, schema, units
    ("simulate", "ingest"),                # data made (simulator) and data read (reports)
    ("prediction",),                       # numpy answers over posterior draws
    ("inference",),                        # sampling, convergence, fit files
    ("bayes",),                            # the PyMC models
    ("decisions",),                        # CONTRACT documents from predictions
    ("checks", "loadtest"),                # checks of fits; what to measure next
    ("reporting", "serve"),                # pages, figures; the simulator as a server
    ("cli", "__main__"),                   # the command line
)

#: Upward imports allowed, each inside a function and each for a stated reason.
UPWARD = {
    # Fit's notebook shortcuts (fit.plot_speedup(), fit.summary(), ...) draw and tabulate
    # with the reporting layer, imported only when called.
    ("bayesspec.inference.fitfile", "bayesspec.reporting.plots"),
    ("bayesspec.inference.fitfile", "bayesspec.reporting.summary"),
    ("bayesspec.inference.fitfile", "bayesspec.decisions"),
    # a fit file names its model class; Fit.law()/group_curve() ask that model
    ("bayesspec.inference.fitfile", "bayesspec.bayes"),
}


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    if len(parts) == 1:
        return None  # the package's lazy public facade
    for index, members in enumerate(LAYERS):
        if parts[1] in members:
            return index
    raise AssertionError(f"{module}: in no layer of LAYERS (add it, and to ARCHITECTURE.md)")


def test_every_import_goes_down_the_layers():
    wrong = []
    for module, targets in graph().items():
        own = layer_of(module)
        for target in targets:
            other = layer_of(target)
            if own is None or other is None or other <= own:
                continue
            if any(module == a and (target == b or target.startswith(b + "."))
                   for a, b in UPWARD):
                continue
            wrong.append(f"{module} -> {target}")
    assert wrong == [], "imports against the layer order:\n" + "\n".join(sorted(wrong))


ROOT_MODULES = {"__init__", "__main__", "errors", "outputs", "uncertainty"}


def test_no_flat_modules_beside_the_entry_points():
    flat = {p.stem for p in PACKAGE.glob("*.py")}
    assert flat <= ROOT_MODULES, sorted(flat - ROOT_MODULES)


#: A module longer than this is one cohesive thing and its docstring says so ("kept whole").
LONG_MODULE_LINES = 650


def test_long_modules_say_why_they_are_whole():
    unexplained = []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        if text.count("\n") > LONG_MODULE_LINES:
            docstring = ast.get_docstring(ast.parse(text)) or ""
            if "kept whole" not in docstring.lower():
                unexplained.append(f"{module_name(path)} ({text.count(chr(10))} lines)")
    assert unexplained == [], unexplained
