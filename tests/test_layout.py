"""The import graph of the packages: no circle, no upward arrow (DESIGN.md, "Layout").

Every import counts, at module top or inside a function: a function-local import that hides a circle
is still a circle. The layers, bottom up: tvmbench.core <- db <- workers <- orchestrator <-
tvmbench.answers <- tvmbench.dashboard <- tvmbench.cli <- tvmbench (the Python API and the entry points).
The answers ask executors' traits of the registry (workers.executors.registry) and nothing else of workers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("tvmbench", "db", "workers", "orchestrator")
# Bottom up. A module belongs to the longest layer name it falls in ("tvmbench" is the API on top).
LAYERS = (
    "tvmbench.core",
    "db",
    "workers",
    "orchestrator",
    "tvmbench.answers",
    "tvmbench.dashboard",
    "tvmbench.cli",
    "tvmbench",
)
# layer -> layers it may import besides its own; everything else is an upward or sideways arrow
ALLOWED = {
    "tvmbench.core": set(),
    "db": {"tvmbench.core"},
    "workers": {"tvmbench.core", "db"},
    "orchestrator": {"tvmbench.core", "db", "workers"},
    "tvmbench.answers": {"tvmbench.core", "db", "workers.executors.registry"},
    "tvmbench.dashboard": {"tvmbench.core", "db", "orchestrator", "tvmbench.answers"},
    "tvmbench.cli": set(LAYERS[:-2]),
    "tvmbench": set(LAYERS[:-1]),
}


def layer(module: str) -> str:
    """The layer a module belongs to: the longest layer name it equals or falls under."""
    return max((name for name in LAYERS if module == name or module.startswith(name + ".")), key=len)


def allowed(src: str, dep: str) -> bool:
    own = layer(src)
    return layer(dep) == own or any(dep == ok or dep.startswith(ok + ".") for ok in ALLOWED[own])


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found[module_name(path)] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports, anywhere in the file (``from a import b`` counts a.b if b is a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, one level up per extra dot
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for name in names:
            # the longest known module the name falls in
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    out.discard(module_name(path))
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    edges = {name: imports(path, known) for name, path in mods.items()}
    # Importing a.b.c runs a/__init__ and a/b/__init__ too: a parent package importing its own
    # children is not a circle with them, so those implicit edges are left out.
    return edges


def test_the_graph_was_read() -> None:
    edges = graph()
    assert "workers.executors.registry" in edges and "tvmbench.core.records" in edges
    assert "tvmbench.core.records" in edges["db.store"], "the parser misses plain `from X import Y` imports"


@pytest.mark.parametrize("name", LAYERS)
def test_no_upward_arrow(name: str) -> None:
    bad = [
        f"{mod} imports {dep}"
        for mod, deps in graph().items()
        if layer(mod) == name
        for dep in deps
        if not allowed(mod, dep)
    ]
    assert not bad, "\n".join(bad)


def test_no_package_level_circle() -> None:
    """The layers' own graph has no circle: two modules of two layers never import each other both ways."""
    edges: dict[str, set[str]] = {}
    for mod, deps in graph().items():
        edges.setdefault(layer(mod), set()).update(layer(d) for d in deps if layer(d) != layer(mod))
    order = {name: i for i, name in enumerate(LAYERS)}
    bad = [f"{a} imports {b}" for a, deps in edges.items() for b in deps if order[b] > order[a]]
    assert not bad, "\n".join(bad)


def test_no_circle() -> None:
    edges = graph()
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []
    circles: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                circles.append(" -> ".join([*stack[stack.index(dep) :], dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not circles, "\n".join(circles)


def _executor_literals(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is an executor's name as a literal, or a tuple, list or set holding one (not deeper:
    a table of display words pairs names with words)."""
    elts = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return any(isinstance(e, ast.Constant) and e.value in names for e in elts)


def _asks_by_name(node: ast.AST, names: set[str], answers: bool) -> bool:
    """Whether ``node`` decides by an executor's name (see the test below)."""
    if isinstance(node, ast.Compare):
        by_column = "executor" in ast.unparse(node.left) and not answers
        if by_column and any(isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn) for op in node.ops):
            return True
        return any(_executor_literals(side, names) for side in [node.left, *node.comparators])
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("isin", "in_"):
        return any(_executor_literals(arg, names) for arg in node.args)
    return False


def test_only_the_registry_asks_which_executor() -> None:
    """No `if executor ==` (or `job.executor in (...)`) in the pipeline outside workers/executors/registry.py,
    and nowhere an executor's name written out to decide with: no comparison with it, no constant bound to
    it (``BASELINE = "onnxruntime"``), no ``.isin([...])`` / ``.in_([...])`` of it. The traits say
    (registry.baseline_names(), static_memory_names(), tunable() ...).

    tvmbench/answers/ may compare a stored row's executor column with a value it was given (a filter is
    data, not behaviour), and may spell names out as display words (columns.CONFIG_WORDS).
    """
    from workers.executors.registry import NAMES

    names = set(NAMES)
    offenders = []
    for name, path in modules().items():
        if name == "workers.executors.registry":
            continue
        tree = ast.parse(path.read_text())
        answers = layer(name) == "tvmbench.answers"
        asks = [n for n in ast.walk(tree) if _asks_by_name(n, names, answers)]
        top = [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]
        bound = [n for n in top if isinstance(n, ast.Assign | ast.AnnAssign) and n.value is not None]
        asks += [n for n in bound if _executor_literals(n.value, names)]  # type: ignore[arg-type]
        offenders += [f"{path.relative_to(ROOT)}:{n.lineno}: {ast.unparse(n)}" for n in asks]
    assert not offenders, "\n".join(offenders)
