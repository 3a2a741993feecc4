#!/usr/bin/env python3
"""Give every package at most a dozen modules at its top (issue 39): move modules into rooms
(sub-packages named for what they hold) and rewrite every reference to them.

    python tools/rooms.py --dry     # what would move, and what is already where it goes
    python tools/rooms.py           # move (git mv), rewrite, write the rooms' __init__ files

Run it from anywhere; it works on the checkout it is in.  It is re-runnable on a newer tree
(the lead runs it again on main after merging the branches written beside it):

- ``MOVES`` is the rename table, as repository paths (old -> new).  A move whose old file is
  there and whose new one is not is made with ``git mv``; one whose new file is there and old
  one is not is already done and skipped; both there, or neither (unless the entry is in
  ``OPTIONAL``, a module another branch adds), is an error that stops the run before it
  changes anything.
- ``STAYS`` names, per roomed package, the modules that stay at its top.  A module at the top
  of such a package that is in neither table (a branch added it) stops the run: give it a
  room in ``MOVES`` or name it in ``STAYS``.
- Every tracked text file (not docs/gpu-runs/, records of past runs) is rewritten, each
  reference in one pass (so a new name is never rewritten again):
  dotted names (``from hetflow.spec.models import``, ``import hetflow.spec.models``,
  ``"hetflow.spec.models.Workflow"`` in mock.patch and monkeypatch targets, ``python -m
  bench.planner``, import-linter's contracts), a module imported from its package (``from
  hetflow.inventory import fakegpus``: imported from its room, under its old name), paths
  (``src/hetflow/spec/models.py``, ``demo/kube_cluster.py``, ``spec/models.py``), short
  names in backticks (````spec.when````), the keys of the lazy facades' tables (``_WHERE``
  of each package that calls ``lazy_names``) and of ``cli/main.py``'s ``COMMANDS``, and
  ``Path(__file__)`` climbs in a file that moved down (``.parent.parent``, ``parents[1]``),
  and Markdown anchors of headings that name a module (``(#...-benchthroughput)``).
- After rewriting, a reference left to an old name (a form the rewrite does not know) is
  an error naming file and line.
- ``ANCHORED`` files measure against an old commit's layout (bench/gitanchor.py): only
  their import lines are rewritten.

On a tree where others changed the same files, run the script rather than merge its
output: take the commits of tools/rooms.py, run it, commit what it did ("the same code
moved"), then the hand-written room docs and the layout rule on top.

Public names do not change: each package's ``__init__`` imports from the rooms, so callers
outside a package need no change.  Afterwards: ``python tools/archtree.py --write``, ruff
format, the unit suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from rooms_table import ANCHORED, FACADE_TABLES, MOVES, OPTIONAL, ROOMS, SKIP_UNDER, SRC, STAYS

ROOT = Path(__file__).resolve().parents[1]
MAX_TOP = 12


class Stop(Exception):
    """Something the table cannot place: the message says what and what to do."""


def dotted(path: str) -> str:
    """A module's dotted name from its path; "" for a file that is no module."""
    if not path.endswith(".py"):
        return ""
    return path.removeprefix("src/").removesuffix(".py").replace("/", ".")


def check_table() -> None:
    news = set(MOVES.values())
    if len(news) != len(MOVES):
        raise Stop("two old modules go to one new place")
    olds = {dotted(o) for o in MOVES} - {""}
    for new in news:
        d = dotted(new)
        for old in olds:
            if d and (d == old or d.startswith(old + ".")):
                raise Stop(f"{new} would be found again by the old name {old}: the rewrite would not be idempotent")
    for room in ROOMS:
        if dotted(room + ".py") in olds:
            raise Stop(f"the room {room} has an old module's name: a re-run would move into it again")


def plan_moves(root: Path) -> tuple[list[tuple[str, str]], list[str]]:
    """(moves to make, notes); raises Stop on a move it cannot place."""
    todo, notes, problems = [], [], []
    for old, new in MOVES.items():
        o, n = (root / old).exists(), (root / new).exists()
        if o and not n:
            todo.append((old, new))
        elif n and not o:
            notes.append(f"done already: {old} -> {new}")
        elif o and n:
            problems.append(f"both {old} and {new} are there: merge them by hand, then run again")
        elif old in OPTIONAL:
            notes.append(f"not in this tree (another branch adds it): {old}")
        else:
            problems.append(f"{old} is not there and neither is {new}: where did it go? fix MOVES")
    moving = {o for o, _ in todo}
    for package, stays in STAYS.items():
        keep = set(stays.split())
        for p in sorted((root / package).glob("*.py")):
            rel = p.relative_to(root).as_posix()
            if p.stem != "__init__" and p.stem not in keep and rel not in moving:
                problems.append(f"{rel} is at the top of {package} and in no table: give it a room in MOVES")
        left = len([p for p in (root / package).glob("*.py") if p.stem != "__init__"]) - len(
            [o for o in moving if o.startswith(package + "/") and o.count("/") == package.count("/") + 1]
        )
        if left > MAX_TOP:
            problems.append(f"{package} would keep {left} modules at its top (at most {MAX_TOP})")
    if problems:
        raise Stop("\n".join(problems))
    return todo, notes


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def make_rooms(root: Path) -> list[str]:
    made = []
    for room, doc in ROOMS.items():
        init = root / room / "__init__.py"
        if not init.exists():
            init.parent.mkdir(parents=True, exist_ok=True)
            init.write_text(f'"""{doc}\n"""\n')
            git(root, "add", str(init))
            made.append(f"{room}/__init__.py")
    return made


# --- the rewrite ---------------------------------------------------------------------------


def _alternation(keys: list[str]) -> str:
    return "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))


class Rewriter:
    def __init__(self) -> None:
        self.dots = {dotted(o): dotted(n) for o, n in MOVES.items() if dotted(o)}
        paths = dict(MOVES)
        # paths relative to src/hetflow, as SIZE_ALLOWED and the docs write them
        paths |= {o.removeprefix(f"{SRC}/"): n.removeprefix(f"{SRC}/") for o, n in MOVES.items() if o.startswith(SRC)}
        paths |= {o.removeprefix("src/"): n.removeprefix("src/") for o, n in MOVES.items() if o.startswith(SRC)}
        self.paths = paths
        # short names in backticks: spec.when, execute.run.dispatch
        self.shorts = {o.removeprefix("hetflow."): n.removeprefix("hetflow.") for o, n in self.dots.items()}
        self.dot_re = re.compile(rf"(?<![\w.])({_alternation(list(self.dots))})(?![\w])")
        self.path_re = re.compile(rf"(?<![\w./-])({_alternation(list(paths))})(?![\w])")
        self.short_re = re.compile(rf"(?<=`)({_alternation(list(self.shorts))})(?=[`.(])")
        # a Markdown heading's anchor drops the dots: (#many-small-steps-python--m-benchthroughput)
        self.slugs = {o.replace(".", ""): n.replace(".", "") for o, n in self.dots.items()}
        self.slug_re = re.compile(rf"(?<=[#-])({_alternation(list(self.slugs))})(?=[)-])")
        # from P import a, b  /  from P import (a, b)
        self.leaves: dict[str, dict[str, str]] = {}
        for o, n in self.dots.items():
            parent, _, leaf = o.rpartition(".")
            self.leaves.setdefault(parent, {})[leaf] = n
        self.from_re = re.compile(
            rf"^([ \t]*)from ({_alternation(list(self.leaves))}) import (\(([^)]*)\)|([^\n(]*))$", re.M
        )

    def dotted_names(self, text: str) -> str:
        return self.dot_re.sub(lambda m: self.dots[m.group(1)], text)

    def from_package(self, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            indent, package = m.group(1), m.group(2)
            body = m.group(4) if m.group(4) is not None else m.group(5)
            body = re.sub(r"#[^\n]*", "", body)
            names = [n.strip() for n in body.replace("\n", ",").split(",") if n.strip()]
            leaves = self.leaves[package]
            moved = [n for n in names if n.split(" as ")[0].strip() in leaves]
            if not moved:
                return m.group(0)
            kept = [n for n in names if n not in moved]
            lines = [f"{indent}from {package} import {', '.join(kept)}"] if kept else []
            for n in moved:
                leaf, _, alias = (s.strip() for s in n.partition(" as "))
                parent, _, newleaf = leaves[leaf].rpartition(".")
                name = alias or leaf
                lines.append(f"{indent}from {parent} import {newleaf}" + (f" as {name}" if name != newleaf else ""))
            return "\n".join(lines)

        return self.from_re.sub(one, text)

    def facade_keys(self, text: str, package: str) -> str:
        rel = {
            o.removeprefix(package + "."): n.removeprefix(package + ".")
            for o, n in self.dots.items()
            if o.startswith(package + ".")
        }
        if not rel:
            return text
        key_re = re.compile(rf'^(\s*)"({_alternation(list(rel))})":', re.M)
        return key_re.sub(lambda m: f'{m.group(1)}"{rel[m.group(2)]}":', text)

    def climbs(self, text: str, depth_added: int) -> str:
        """``Path(__file__)`` climbs to the root in a file moved ``depth_added`` folders down."""
        if depth_added <= 0:
            return text

        def one(m: re.Match[str]) -> str:
            up = 1 if m.group(2) is not None else int(m.group(3))
            return f"{m.group(1)}.parents[{up + depth_added}]"

        return re.sub(r"(Path\(__file__\)\.resolve\(\))(?:(\.parent\.parent)(?![\w.])|\.parents\[(\d)\])", one, text)

    def rewrite(self, text: str, rel: str, facade: str | None, depth_added: int) -> str:
        text = self.from_package(text)
        text = self.dotted_names(text)
        if rel not in ANCHORED:  # their paths name the old commit's tree
            text = self.path_re.sub(lambda m: self.paths[m.group(1)], text)
            text = self.short_re.sub(lambda m: self.shorts[m.group(1)], text)
            if rel.endswith(".md"):
                text = re.sub(
                    r"\(#[^)\s]*\)", lambda m: self.slug_re.sub(lambda s: self.slugs[s.group(1)], m.group(0)), text
                )
        if facade:
            text = self.facade_keys(text, facade)
        return self.climbs(text, depth_added)

    def leftovers(self, text: str, rel: str) -> list[str]:
        found = []
        for i, line in enumerate(text.splitlines(), 1):
            for m in self.dot_re.finditer(line):
                found.append(f"{rel}:{i}: {m.group(1)}")
        return found


def tracked_text(root: Path) -> list[str]:
    files = git(root, "ls-files", "-z").split("\0")
    mine = {"tools/rooms.py", "tools/rooms_table.py"}  # the table names the old tree
    return [f for f in files if f and f not in mine and not f.startswith(SKIP_UNDER) and (root / f).is_file()]


def facade_of(rel: str, text: str) -> str | None:
    if rel in FACADE_TABLES:
        return FACADE_TABLES[rel]
    if rel.endswith("/__init__.py") and "lazy_names(" in text and rel.startswith(SRC):
        return dotted(rel.removesuffix("/__init__.py") + ".py")
    return None


def run(root: Path, dry: bool) -> int:
    check_table()
    todo, notes = plan_moves(root)
    for n in notes:
        print(n)
    for old, new in todo:
        print(f"move: {old} -> {new}")
    if dry:
        return 0
    made = make_rooms(root)
    for old, new in todo:
        (root / new).parent.mkdir(parents=True, exist_ok=True)
        git(root, "mv", old, new)
    # only files moved by this run climb further to the root (a re-run leaves them be)
    depth = {new: new.count("/") - old.count("/") for old, new in todo}
    rw = Rewriter()
    changed: list[str] = []
    left: list[str] = []
    for rel in tracked_text(root):
        path = root / rel
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new_text = rw.rewrite(text, rel, facade_of(rel, text), depth.get(rel, 0))
        if new_text != text:
            path.write_text(new_text)
            changed.append(rel)
        left += rw.leftovers(new_text, rel)
    print(f"{len(todo)} modules moved, {len(changed)} files rewritten")
    if left:
        raise Stop("old names left that the rewrite does not know how to place:\n" + "\n".join(left))
    tidy(root, sorted({*made, *(c for c in changed if c.endswith(".py"))}))
    return 0


def tidy(root: Path, files: list[str]) -> None:
    """Imports sorted and lines wrapped as ruff wants them (a longer module path can put an
    import out of order or over the line), and ARCHITECTURE.md's generated tree."""
    ruff = Path(sys.executable).with_name("ruff")
    if files and ruff.exists():
        subprocess.run([str(ruff), "check", "-q", "--select", "I", "--fix", *files], cwd=root, check=False)
        subprocess.run([str(ruff), "format", "-q", *files], cwd=root, check=False)
    elif files:
        print("ruff is not beside this python: run ruff check --select I --fix and ruff format yourself")
    subprocess.run([sys.executable, "tools/archtree.py", "--write"], cwd=root, check=True)


def main(argv: list[str]) -> int:
    try:
        return run(ROOT, "--dry" in argv)
    except Stop as e:
        print(f"rooms.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
