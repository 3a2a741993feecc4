"""The layout stays true: a package imports another package's public names only.

import-linter (``make lint``; the contracts are in pyproject.toml) keeps the flow one way
and private ``_modules`` private.  What it cannot see is ``__all__``: this test reads every
module under src/hetflow and reports each import from another package that does not go
through that package's ``__all__``::

    from hetflow.inventory import Node                  fine: Node is in inventory.__all__
    from hetflow.inventory.models import Node           not: 'models' is not in its __all__
    from hetflow.export.kubernetes import to_yaml       fine: 'kubernetes' is in export.__all__,
                                                        to_yaml in export.kubernetes.__all__

Imports inside one package, and of the base modules hetflow.errors and hetflow.config,
are free.  Inside a package, too, a private name (``_name``) stays in its module
(``test_no_private_names_imported_across_modules``), and modules and functions stay small
(``test_modules_and_functions_stay_small``: 450 and 80 lines), in tools/, bench/ and demo/
too (``test_tools_bench_and_demo_stay_small_too``), and no package holds more than a dozen
modules at its top (``test_at_most_a_dozen_modules_at_the_top_of_a_package``: sub-packages
named for what they hold, issue 39).  The sources are parsed, not
imported (``__all__`` is read as a literal), so the check has no side effects and runs
on made-up trees too (the tests at the end).
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

# Packages whose imports of other packages do not yet all go through __all__ (issue 13 is
# converting them, one helper each).  A listed package with violations xfails and shows
# them (`pytest -ra`); a listed package with none fails, so the list cannot go stale:
# the lead removes each entry after merging its conversion.  Packages not listed must be clean.
NOT_YET_CONVERTED: dict[str, str] = {}


def _literal_all(init: Path) -> frozenset[str] | None:
    """``__all__`` of a package's ``__init__.py`` when it is a literal list or tuple."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                value = ast.literal_eval(node.value)
                return frozenset(value)
    return None


class Layout:
    """The packages under ``root`` (a directory holding ``hetflow/``) and their ``__all__``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, dotted: str) -> Path:
        return self.root.joinpath(*dotted.split("."))

    def is_package(self, dotted: str) -> bool:
        return (self._path(dotted) / "__init__.py").is_file()

    def is_module(self, dotted: str) -> bool:
        """A module or a package (``from P import name`` imports a submodule, not a name)."""
        return self._path(dotted).with_suffix(".py").is_file() or self.is_package(dotted)

    def public(self, dotted: str) -> frozenset[str] | None:
        return _literal_all(self._path(dotted) / "__init__.py") if self.is_package(dotted) else None

    def modules(self) -> Iterator[tuple[str, Path]]:
        for path in sorted((self.root / "hetflow").rglob("*.py")):
            parts = path.relative_to(self.root).with_suffix("").parts
            yield ".".join(parts[:-1] if parts[-1] == "__init__" else parts), path

    def why_not(self, target: str, names: list[str]) -> str | None:
        """None when ``from target import names`` uses public names only, else why not.
        Each step below ``hetflow.B`` must be in its parent's ``__all__``, and the names
        in the last step's."""
        parts = target.split(".")
        current = ".".join(parts[:2])
        for step in [*parts[2:], None]:
            public = self.public(current)
            wanted = [step] if step is not None else names
            if public is None:
                return f"{current} has no __all__"
            missing = [n for n in wanted if n not in public]
            if missing:
                return f"{', '.join(repr(m) for m in missing)} not in {current}.__all__"
            if step is None:
                return None
            current = f"{current}.{step}"
        return None


def _imports(tree: ast.Module, module: str, is_init: bool) -> Iterator[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) for every import; ``import a.b`` as (a.b, [])."""
    package = module if is_init else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []


def violations(root: Path) -> dict[str, list[str]]:
    """Per importing package (the name under hetflow.), every import that reaches past
    another package's ``__all__``, as "path:line: from X import Y: why"."""
    layout = Layout(root)
    found: dict[str, list[str]] = {}
    for module, path in layout.modules():
        parts = module.split(".")
        if len(parts) < 2 or not layout.is_package(".".join(parts[:2])):
            continue  # hetflow itself, hetflow.errors, hetflow.config: the base
        own = parts[1]
        for line, target, names in _imports(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            tparts = target.split(".")
            if tparts[0] != "hetflow" or len(tparts) < 2 or tparts[1] == own:
                continue
            if not layout.is_package(".".join(tparts[:2])):
                continue  # a base module
            if not names and len(tparts) == 2:
                continue  # `import hetflow.B`: attributes are checked by mypy, not here
            why = layout.why_not(target, names) if names else layout.why_not(".".join(tparts[:-1]), [tparts[-1]])
            if why is not None:
                shown = f"from {target} import {', '.join(names)}" if names else f"import {target}"
                found.setdefault(own, []).append(f"{path.relative_to(root)}:{line}: {shown}: {why}")
    return found


def _packages(root: Path) -> list[str]:
    return sorted(p.parent.name for p in (root / "hetflow").glob("*/__init__.py"))


FOUND = violations(SRC)


@pytest.mark.parametrize("package", _packages(SRC))
def test_imports_go_through_public_names(package: str) -> None:
    found = FOUND.get(package, [])
    if package in NOT_YET_CONVERTED:
        assert found, f"hetflow.{package} imports only public names now: remove it from NOT_YET_CONVERTED"
        files = sorted({v.split(":")[0] for v in found})
        pytest.xfail(f"{len(found)} import(s) not yet converted, in {', '.join(files)}; first: {found[0]}")
    assert not found, "imports past another package's __all__:\n" + "\n".join(found)


def test_pending_list_names_real_packages() -> None:
    assert set(NOT_YET_CONVERTED) <= set(_packages(SRC))


# --- no private names across modules -------------------------------------------------------

# Private names (``_name``, not a module) imported from another module, today, in packages
# other helpers of issue 24 are reworking (as "importer: from module import _name" -> why).
# A listed import still there passes; a listed import gone fails, so the list cannot go
# stale: the lead deletes each entry after merging the branch that removes it.  Anything
# not listed fails.
PRIVATE_IMPORTS_ALLOWED: dict[str, str] = {}


def private_imports(root: Path) -> dict[str, str]:
    """Every ``from M import _name`` under ``root``/hetflow where ``_name`` is not a
    submodule (a private module is import-linter's "private" contract), keyed
    "importer: from M import _name", valued "path:line".  A private name is its module's
    own: a helper two modules share gets a public name in one of them."""
    layout = Layout(root)
    found: dict[str, str] = {}
    for module, path in layout.modules():
        for line, target, names in _imports(ast.parse(path.read_text()), module, path.name == "__init__.py"):
            if not target.startswith("hetflow"):
                continue
            for name in names:
                private = name.startswith("_") and not name.startswith("__")
                if private and not layout.is_module(f"{target}.{name}"):
                    found[f"{module}: from {target} import {name}"] = f"{path.relative_to(root)}:{line}"
    return found


def test_no_private_names_imported_across_modules() -> None:
    found = private_imports(SRC)
    unlisted = [f"{where}: {key}" for key, where in sorted(found.items()) if key not in PRIVATE_IMPORTS_ALLOWED]
    gone = sorted(set(PRIVATE_IMPORTS_ALLOWED) - set(found))
    assert not unlisted, "private names imported from another module (give them a public name):\n" + "\n".join(unlisted)
    assert not gone, "no longer imported: remove from PRIVATE_IMPORTS_ALLOWED:\n" + "\n".join(gone)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from hetflow.low.models import _helper", ["hetflow.high.use: from hetflow.low.models import _helper"]),
        ("from hetflow.high.other import _z", ["hetflow.high.use: from hetflow.high.other import _z"]),
        ("from .other import _z", ["hetflow.high.use: from hetflow.high.other import _z"]),
        ("def late():\n    from hetflow.high.other import _z", ["hetflow.high.use: from hetflow.high.other import _z"]),
        ("from hetflow.low import _private", []),
        ("from hetflow.low._private import X", []),
        ("from hetflow.low.models import __version__", []),
        ("from os import _exit", []),
        ("from hetflow.low.models import Node as _Node", []),
    ],
    ids=[
        "other-package",
        "same-package",
        "relative",
        "lazy",
        "private-module",
        "public-name-of-private-module",
        "dunder",
        "stdlib",
        "public-name-aliased",
    ],
)
def test_finds_private_names_imported(tmp_path: Path, source: str, found: list[str]) -> None:
    root = _tree(tmp_path, {**LOW, "hetflow/high/__init__.py": "", "hetflow/high/use.py": source + "\n"})
    assert sorted(private_imports(root)) == found


# --- sizes: modules readable in one sitting, functions that do one thing ---------------------

MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 80
# A function may be longer when its docstring says why, with these words in it: "long because".
LONG_BECAUSE = "long because"

# Today's offenders outside spec/, images/, inventory/ and state/ (whose sizes issue 24's core
# helper brought under the limits), as "path under src/hetflow" or "path::function" -> why
# it may stay.  A listed entry now within its limit fails, so the list only shrinks: the lead
# deletes each entry after merging the branch that splits it.
SIZE_ALLOWED: dict[str, str] = {}


def sizes_over(base: Path) -> dict[str, str]:
    """Every module under ``base`` over ``MAX_MODULE_LINES`` lines and every function over
    ``MAX_FUNCTION_LINES`` whose docstring does not say why (``LONG_BECAUSE``), keyed
    "path under base" or "path::function", valued with its size."""
    found: dict[str, str] = {}
    for path in sorted(base.rglob("*.py")):
        name = path.relative_to(base).as_posix()
        text = path.read_text()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = f"{lines} lines"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
                length = node.end_lineno - node.lineno + 1
                why = (ast.get_docstring(node) or "").lower()
                if length > MAX_FUNCTION_LINES and LONG_BECAUSE not in why:
                    found[f"{name}::{node.name}"] = f"{length} lines (line {node.lineno})"
    return found


def oversized(root: Path) -> dict[str, str]:
    """``sizes_over`` src's ``root``/hetflow, keyed as ``SIZE_ALLOWED`` is."""
    return sizes_over(root / "hetflow")


def test_modules_and_functions_stay_small() -> None:
    found = oversized(SRC)
    unlisted = [f"{key}: {size}" for key, size in sorted(found.items()) if key not in SIZE_ALLOWED]
    gone = sorted(set(SIZE_ALLOWED) - set(found))
    assert not unlisted, (
        f"over {MAX_MODULE_LINES} lines a module, or {MAX_FUNCTION_LINES} a function (split it, or say in its"
        f" docstring why it is {LONG_BECAUSE} ...):\n" + "\n".join(unlisted)
    )
    assert not gone, "within the limits now: remove from SIZE_ALLOWED:\n" + "\n".join(gone)


def _function(lines: int, doc: str = "") -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1 - bool(doc)))
    return "def f():\n" + (f'    """{doc}"""\n' if doc else "") + body


@pytest.mark.parametrize(
    ("files", "found"),
    [
        ({"hetflow/low/big.py": "x = 1\n" * 451}, ["low/big.py"]),
        ({"hetflow/low/big.py": "x = 1\n" * 450}, []),
        ({"hetflow/low/f.py": _function(81)}, ["low/f.py::f"]),
        ({"hetflow/low/f.py": _function(80)}, []),
        ({"hetflow/low/f.py": _function(81, "One pass; long because the steps share state.")}, []),
        ({"hetflow/low/f.py": _function(81, "Does a lot.")}, ["low/f.py::f"]),
        (
            {"hetflow/low/f.py": "class C:\n" + textwrap.indent(_function(81), "    ")},
            ["low/f.py::f"],
        ),
    ],
    ids=["module-over", "module-at-limit", "function-over", "function-at-limit", "reason-given", "no-reason", "method"],
)
def test_finds_oversized(tmp_path: Path, files: dict[str, str], found: list[str]) -> None:
    root = _tree(tmp_path, {"hetflow/low/__init__.py": "", **files})
    assert sorted(oversized(root)) == found


# --- the same sizes beyond src: tools/ (scripts and packages), bench/ and demo/ --------------

REPO = SRC.parent
BEYOND_SRC = ("tools", "bench", "demo")

# Files there that may stay over a limit, as "path from the repository root" or
# "path::function" -> why it cannot be split.  As with SIZE_ALLOWED, an entry now within its
# limit fails, so the list only shrinks.  Empty: everything there could be split (issue 39); a
# function that truly cannot says why in its docstring (LONG_BECAUSE) instead.
SIZE_ALLOWED_BEYOND_SRC: dict[str, str] = {}


def oversized_beyond_src(repo: Path) -> dict[str, str]:
    """``sizes_over`` each of ``BEYOND_SRC`` under ``repo``, keyed from the repository root
    as ``SIZE_ALLOWED_BEYOND_SRC`` is (tools/gpu_check/cli.py::main)."""
    found: dict[str, str] = {}
    for tree in BEYOND_SRC:
        if (repo / tree).is_dir():
            found |= {f"{tree}/{key}": size for key, size in sizes_over(repo / tree).items()}
    return found


FOUND_BEYOND_SRC = oversized_beyond_src(REPO)


@pytest.mark.parametrize("tree", BEYOND_SRC)
def test_tools_bench_and_demo_stay_small_too(tree: str) -> None:
    found = {k: v for k, v in FOUND_BEYOND_SRC.items() if k.startswith(f"{tree}/")}
    allowed = {k for k in SIZE_ALLOWED_BEYOND_SRC if k.startswith(f"{tree}/")}
    unlisted = [f"{key}: {size}" for key, size in sorted(found.items()) if key not in allowed]
    gone = sorted(allowed - set(found))
    assert not unlisted, (
        f"over {MAX_MODULE_LINES} lines a module, or {MAX_FUNCTION_LINES} a function (split it, or say in its"
        f" docstring why it is {LONG_BECAUSE} ...):\n" + "\n".join(unlisted)
    )
    assert not gone, "within the limits now: remove from SIZE_ALLOWED_BEYOND_SRC:\n" + "\n".join(gone)


def test_the_allow_list_beyond_src_names_those_trees() -> None:
    assert all(key.split("/")[0] in BEYOND_SRC for key in SIZE_ALLOWED_BEYOND_SRC)


@pytest.mark.parametrize(
    ("files", "found"),
    [
        ({"tools/big.py": "x = 1\n" * 451}, ["tools/big.py"]),
        ({"tools/kit/__init__.py": "", "tools/kit/part.py": "x = 1\n" * 451}, ["tools/kit/part.py"]),
        ({"bench/f.py": _function(81)}, ["bench/f.py::f"]),
        ({"demo/f.py": _function(81, "Long because one script.")}, []),
        ({"demo/big.py": "x = 1\n" * 450}, []),
        ({"tests/big.py": "x = 1\n" * 451, "examples/big.py": "x = 1\n" * 451}, []),
    ],
    ids=["tools-script", "tools-package", "bench-function", "reason-given", "at-limit", "other-trees"],
)
def test_finds_oversized_beyond_src(tmp_path: Path, files: dict[str, str], found: list[str]) -> None:
    root = _tree(tmp_path, files)
    assert sorted(oversized_beyond_src(root)) == found


# --- rooms: at most a dozen modules at the top of any package (issue 39) ---------------------

MAX_TOP_MODULES = 12
TREES = ("src/hetflow", "tools", "bench", "demo")

# Packages that may keep more modules at their top, as "path from the repository root" -> why
# a room would not read better.  Empty: every package has rooms (tools/rooms.py); as with the
# size lists, an entry now within the limit fails, so the list only shrinks.
TOP_ALLOWED: dict[str, str] = {}


def crowded(repo: Path) -> dict[str, int]:
    """Every package under ``TREES`` (a tree that is a package itself included; tools/, not
    one, only for the packages in it) with more than ``MAX_TOP_MODULES`` modules at its top,
    ``__init__`` not counted, keyed by its path from the repository root."""
    found: dict[str, int] = {}
    for tree in TREES:
        for init in sorted((repo / tree).rglob("__init__.py")):
            package = init.parent
            count = len([p for p in package.glob("*.py") if p.name != "__init__.py"])
            if count > MAX_TOP_MODULES:
                found[package.relative_to(repo).as_posix()] = count
    return found


FOUND_CROWDED = crowded(REPO)


@pytest.mark.parametrize("tree", TREES)
def test_at_most_a_dozen_modules_at_the_top_of_a_package(tree: str) -> None:
    found = {k: v for k, v in FOUND_CROWDED.items() if k == tree or k.startswith(f"{tree}/")}
    allowed = {k for k in TOP_ALLOWED if k == tree or k.startswith(f"{tree}/")}
    unlisted = [f"{key}: {count} modules" for key, count in sorted(found.items()) if key not in allowed]
    gone = sorted(allowed - set(found))
    assert not unlisted, (
        f"over {MAX_TOP_MODULES} modules at the top of a package: give them rooms, sub-packages named for"
        " what they hold (tools/rooms.py moves them and rewrites every reference):\n" + "\n".join(unlisted)
    )
    assert not gone, "within the limit now: remove from TOP_ALLOWED:\n" + "\n".join(gone)


def _modules(folder: str, count: int) -> dict[str, str]:
    return {f"{folder}/m{i}.py": "" for i in range(count)}


@pytest.mark.parametrize(
    ("files", "found"),
    [
        ({"src/hetflow/a/__init__.py": "", **_modules("src/hetflow/a", 13)}, {"src/hetflow/a": 13}),
        ({"src/hetflow/a/__init__.py": "", **_modules("src/hetflow/a", 12)}, {}),
        (
            {"src/hetflow/a/__init__.py": "", "src/hetflow/a/b/__init__.py": "", **_modules("src/hetflow/a/b", 13)},
            {"src/hetflow/a/b": 13},
        ),
        ({"src/hetflow/a/__init__.py": "", **_modules("src/hetflow/a/data", 13)}, {}),
        ({"bench/__init__.py": "", **_modules("bench", 14)}, {"bench": 14}),
        ({"tools/kit/__init__.py": "", **_modules("tools/kit", 13), **_modules("tools", 20)}, {"tools/kit": 13}),
        ({**_modules("demo", 13)}, {}),
    ],
    ids=["over", "at-limit", "sub-package", "plain-folder", "bench-package", "tools-scripts-free", "demo-not-package"],
)
def test_finds_crowded_packages(tmp_path: Path, files: dict[str, str], found: dict[str, int]) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert crowded(tmp_path) == found


def test_the_top_allow_list_names_packages() -> None:
    assert all((REPO / key / "__init__.py").is_file() for key in TOP_ALLOWED)


# --- the check itself, on made-up trees ----------------------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in {"hetflow/__init__.py": "", "hetflow/errors.py": "", **files}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


LOW = {
    "hetflow/low/__init__.py": 'from hetflow.low.models import Node\n__all__ = ["Node", "sub"]\n',
    "hetflow/low/models.py": "class Node: ...\nclass Hidden: ...\n",
    "hetflow/low/_private.py": "X = 1\n",
    "hetflow/low/sub/__init__.py": '__all__ = ["f"]\ndef f() -> None: ...\ndef g() -> None: ...\n',
    "hetflow/bare/__init__.py": "from hetflow.bare.m import y\n",
    "hetflow/bare/m.py": "y = 1\n",
}


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ("from hetflow.low.models import Node", "'models' not in hetflow.low.__all__"),
        ("from hetflow.low import Hidden", "'Hidden' not in hetflow.low.__all__"),
        ("from hetflow.low._private import X", "'_private' not in hetflow.low.__all__"),
        ("import hetflow.low.models", "'models' not in hetflow.low.__all__"),
        ("from hetflow.low.sub import g", "'g' not in hetflow.low.sub.__all__"),
        ("from hetflow.bare import y", "hetflow.bare has no __all__"),
        ("def late():\n    from hetflow.low.models import Node", "'models' not in hetflow.low.__all__"),
    ],
    ids=["submodule", "unlisted-name", "private-module", "import-submodule", "nested-unlisted", "no-all", "lazy"],
)
def test_reports_imports_past_all(tmp_path: Path, source: str, why: str) -> None:
    root = _tree(tmp_path, {**LOW, "hetflow/high/__init__.py": "", "hetflow/high/use.py": source + "\n"})
    found = violations(root)
    assert list(found) == ["high"]
    assert len(found["high"]) == 1 and found["high"][0].endswith(why)


@pytest.mark.parametrize(
    "source",
    [
        "from hetflow.low import Node",
        "from hetflow.low.sub import f",
        "from hetflow.low import sub",
        "import hetflow.low",
        "from hetflow.errors import Anything",
        "from hetflow.high.other import z",
        "from . import other",
        "import os",
    ],
    ids=[
        "public-name",
        "public-subpackage",
        "subpackage-itself",
        "package",
        "base",
        "own-package",
        "relative",
        "stdlib",
    ],
)
def test_allows_public_and_own_imports(tmp_path: Path, source: str) -> None:
    root = _tree(tmp_path, {**LOW, "hetflow/high/__init__.py": "", "hetflow/high/use.py": source + "\n"})
    assert violations(root) == {}


def test_relative_import_into_another_package_is_checked(tmp_path: Path) -> None:
    root = _tree(tmp_path, {**LOW, "hetflow/high/__init__.py": "", "hetflow/high/use.py": "from ..low import Hidden\n"})
    assert violations(root) == {
        "high": ["hetflow/high/use.py:1: from hetflow.low import Hidden: 'Hidden' not in hetflow.low.__all__"]
    }


def test_no_public_name_is_also_a_submodule_name() -> None:
    """``from hetflow.plan import check`` must not depend on import order: once the
    submodule ``hetflow.plan.check`` is imported, Python sets the package attribute
    ``check`` to that module, shadowing a function of the same name in ``__all__``."""
    layout = Layout(SRC)
    clashes = []
    for dotted, path in layout.modules():
        if path.name != "__init__.py":
            continue
        public = layout.public(dotted) or frozenset()
        subs = {p.stem for p in path.parent.glob("*.py") if p.stem != "__init__"}
        subs |= {p.name for p in path.parent.iterdir() if (p / "__init__.py").is_file()}
        exported_modules = {n for n in public if n in subs and (path.parent / n / "__init__.py").is_file()}
        clashes += [f"{dotted}.{n}" for n in sorted(public & subs) if n not in exported_modules]
    assert not clashes, f"public names that are also submodules: {clashes}"


def test_the_tree_in_architecture_md_is_the_tree_in_src() -> None:
    """ARCHITECTURE.md's tree is generated (`python tools/archtree.py --write`): a package or
    module added, moved or removed without regenerating it fails here."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("archtree", SRC.parent / "tools" / "archtree.py")
    assert spec is not None and spec.loader is not None
    archtree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(archtree)
    doc = (SRC.parent / "ARCHITECTURE.md").read_text()
    assert archtree.tree() in doc, "ARCHITECTURE.md's tree is stale: run python tools/archtree.py --write"
