"""The documentation site's "What hetflow promises" (docs/promises.md) names, for each promise, the tests that hold it:
every test named there must exist, so a renamed or deleted test cannot leave a promise
that nothing holds."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {"I": ROOT / "tests" / "integration", "U": ROOT / "tests" / "unit"}


def _section() -> str:
    text = (ROOT / "docs" / "promises.md").read_text()
    return text[text.index("# What hetflow promises") :]


def _named(section: str) -> list[tuple[Path, str]]:
    """(file, test) for every name in the 'held by' column: `file.py::test` starts a file,
    a bare `::test` is in the file named before it in the same cell."""
    named: list[tuple[Path, str]] = []
    for row in section.splitlines():
        if not row.startswith("| ") or row.startswith("| promise") or "held by" in row:
            continue
        cell = row.rstrip().rstrip("|").rsplit("|", 1)[-1]
        if cell.strip() == "the same two tests":
            continue
        folder: Path | None = None
        current: Path | None = None
        for kind, token in re.findall(r"(?:(I|U): )?`([^`]+)`", cell):
            if kind:
                folder = FOLDERS[kind]
            if "::" not in token:
                continue
            file, _, name = token.partition("::")
            if file:
                assert folder is not None, f"no I:/U: before {token!r} in: {row}"
                current = folder / file
            assert current is not None, f"{token!r} names no file in: {row}"
            named.append((current, name))
    return named


def test_every_promise_names_tests_that_exist() -> None:
    named = _named(_section())
    assert len(named) >= 25  # the section lists every promise of issue 22 and the proxy's
    missing = [
        f"{path.relative_to(ROOT)}::{name}"
        for path, name in named
        if not path.is_file() or not re.search(rf"^\s*def {re.escape(name)}\(", path.read_text(), re.M)
    ]
    assert not missing, f"docs/promises.md promises tests that do not exist: {missing}"


def test_every_promise_row_names_at_least_one_test() -> None:
    rows = [
        r
        for r in _section().splitlines()
        if r.startswith("| ") and not r.startswith("| promise") and not r.startswith("|---")
    ]
    assert rows
    bare = [r for r in rows if "::" not in r and "the same two tests" not in r]
    assert not bare, f"promises that name no test: {bare}"
