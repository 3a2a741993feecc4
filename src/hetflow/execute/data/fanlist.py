"""A fan-out's list read from a file (``{lines: REF}``) or a folder (``{files: REF}``), bounded.

A list known only at submit (workflow data) or at run time (an upstream step's output) meets
the same limit as one written in the file (``spec.MAX_FANOUT_ITEMS``): it is counted while it
is read, and reading stops at the first item over the limit, so a file of millions of lines
(issue 37: 200,000 lines became 200,001 steps) costs neither the memory of its list nor the
steps, and the fan-out step fails saying how many it may have.
"""

from __future__ import annotations

from pathlib import Path

from hetflow.errors import HetflowError
from hetflow.spec import MAX_FANOUT_ITEMS


class TooManyItems(HetflowError):
    """A fan-out's list holds more items than a fan-out may make."""


def read_lines(path: Path, ref: str, limit: int = MAX_FANOUT_ITEMS) -> list[str]:
    """``{lines: REF}`` items: the file's non-empty lines, stripped (like Nextflow's
    splitText), read line by line; TooManyItems once a line over ``limit`` is read."""
    items: list[str] = []
    with path.open(encoding="utf-8", errors="replace") as f:
        for physical in f:
            for line in physical.splitlines():  # every separator str.splitlines knows
                if line.strip():
                    items.append(line.strip())
            if len(items) > limit:
                raise _too_many("lines", ref, path, limit)
    return items


def list_files(folder: Path, ref: str, limit: int = MAX_FANOUT_ITEMS) -> list[str]:
    """``{files: REF}`` over a folder: every file under it, as a path relative to it;
    TooManyItems once a file over ``limit`` is seen."""
    rels: list[str] = []
    for p in folder.rglob("*"):  # a generator: counted as it walks
        if p.is_file():
            rels.append(p.relative_to(folder).as_posix())
            if len(rels) > limit:
                raise _too_many("files", ref, folder, limit)
    return rels


def check_count(kind: str, ref: str, count: int, where: str, limit: int = MAX_FANOUT_ITEMS) -> None:
    """A list already in hand (a data set's files, listed at submit) against the limit."""
    if count > limit:
        raise TooManyItems(f"foreach {kind} of {ref} ({where}) holds {count} items; a fan-out makes at most {limit}")


def _too_many(kind: str, ref: str, path: Path, limit: int) -> TooManyItems:
    what = "lines" if kind == "lines" else "files"
    return TooManyItems(
        f"foreach {kind} of {ref} ({path}) holds more than {limit} items (reading stopped at {what[:-1]} {limit + 1});"
        f" a fan-out makes at most {limit}: split the list, or fan out over fewer, bigger pieces"
    )
