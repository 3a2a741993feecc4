"""The planner package's own layout rules (issue 24): no import cycle between its modules,
``if TYPE_CHECKING:`` imports included (a cycle hidden from the interpreter is still one a
reader must untangle), and no module importing another's private (``_``) names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hetflow.plan

ROOT = Path(hetflow.plan.__file__).parent


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Module -> (module it imports from, names) for every ``hetflow.plan`` import."""
    out: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        mine = _module(path)
        found: list[tuple[str, tuple[str, ...]]] = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hetflow.plan"):
                found.append((node.module, tuple(a.name for a in node.names)))
            elif isinstance(node, ast.Import):
                found += [(a.name, ()) for a in node.names if a.name.startswith("hetflow.plan")]
        out[mine] = found
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_between_planner_modules() -> None:
    # the package facade imports its modules only for type checkers; it is no module's dependency
    graph = {
        m: {target for target, _ in imports if target != m and target != "hetflow.plan"}
        for m, imports in _imports().items()
        if m != "hetflow.plan"
    }
    assert _cycles(graph) == []


@pytest.mark.parametrize(
    "graph, cycles",
    [
        ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
    ids=["two-module-cycle", "a-chain", "three-module-cycle"],
)
def test_the_cycle_finder_finds_cycles(graph: dict[str, set[str]], cycles: list[list[str]]) -> None:
    assert _cycles(graph) == cycles


def test_no_planner_module_imports_another_modules_private_names() -> None:
    private = [
        f"{m} imports {name} from {target}"
        for m, imports in _imports().items()
        for target, names in imports
        for name in names
        if name.startswith("_") and target != m
    ]
    assert private == []
