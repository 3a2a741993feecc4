"""The shape issue 24 gave execute/ and export/, held: no module over 450 lines, no function
over 80 lines unless its docstring says why ("on purpose"), every sub-package of execute/
says in its ``__init__`` docstring what it holds, no module imports another's private name,
and every backend, local included, is made by the factory (no ``LocalBackend(`` elsewhere).
The sources are parsed, not imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "hetflow"
AREAS = ("execute", "export")
MAX_MODULE = 450
MAX_FUNCTION = 80


def modules() -> list[Path]:
    return sorted(p for area in AREAS for p in (SRC / area).rglob("*.py"))


def rel(p: Path) -> str:
    return str(p.relative_to(SRC.parent))


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_module_is_small_and_its_long_functions_say_why(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= MAX_MODULE, f"{rel(path)} has {len(text.splitlines())} lines: split it"
    long = [
        f"{f.name} ({f.end_lineno - f.lineno + 1} lines)"
        for f in ast.walk(ast.parse(text))
        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
        and f.end_lineno is not None
        and f.end_lineno - f.lineno + 1 > MAX_FUNCTION
        and "on purpose" not in (ast.get_docstring(f) or "")
    ]
    assert not long, f"{rel(path)}: over {MAX_FUNCTION} lines with no reason in the docstring: {long}"


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_no_private_name_is_imported_from_another_module(path: Path) -> None:
    private = [
        f"{node.module}.{a.name}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hetflow")
        for a in node.names
        if a.name.startswith("_") and not a.name.startswith("__")
    ]
    assert not private, f"{rel(path)} imports private names {private}: make them public or keep them home"


@pytest.mark.parametrize(
    "package", sorted(p.parent for p in (SRC / "execute").rglob("__init__.py") if p.parent != SRC / "execute"), ids=rel
)
def test_every_execute_sub_package_says_what_it_holds(package: Path) -> None:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text()))
    assert doc and len(doc.split()) >= 20, f"{rel(package)}/__init__.py needs a paragraph saying what it holds"


def test_only_the_factory_makes_the_local_backend() -> None:
    home = {SRC / "execute" / "backends" / "factory.py"}
    makers = [rel(p) for p in modules() if p not in home and "LocalBackend(" in p.read_text()]
    assert not makers, f"build backends with execute.backends.make_backend, not LocalBackend(...): {makers}"
