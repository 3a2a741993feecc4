"""The shape issue 24 gave execute/, held: every sub-package of execute/ says in its
``__init__`` docstring what it holds, and every backend, local included, is made by the
factory (no ``LocalBackend(`` elsewhere).  Module and function sizes and private names are
held for the whole tree by test_layout.py.  The sources are parsed, not imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "hetflow"
AREAS = ("execute", "export")


def modules() -> list[Path]:
    return sorted(p for area in AREAS for p in (SRC / area).rglob("*.py"))


def rel(p: Path) -> str:
    return str(p.relative_to(SRC.parent))


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
