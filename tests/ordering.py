"""The suite's order: the longest test files first (issue 43).

``make test`` runs ``pytest -n 3 --dist loadfile``: each worker takes whole files, so the
wall time is the busiest worker's sum of files.  xdist's own order hands out the files with
the most tests first, which puts the integration files of two or three long tests (a cluster
start, a real workflow end to end) at the very end, where one of them runs alone while the
other workers are idle.  Here the files are ordered by how long they took in a full run
(tests/durations.json, written by ``python -m tests.ordering JUNIT.xml``), longest first, so
the greedy hand-out is the classic longest-processing-time schedule; a file the table does not
know yet (a new one) comes right after the files of its folder that it would outlast at the
folder's typical length, so new integration files still run before the unit files.

The tests of a file keep their order and stay together (module-scoped fixtures: a cluster per
file); ``pytest_configure`` turns off xdist's reordering by count (``--loadscope-reorder``) so
that this order is the one the workers are given.
"""

from __future__ import annotations

import json
import statistics
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("durations.json")


def durations(table: Path = TABLE) -> dict[str, float]:
    """Seconds per test file (its tests' setup, call and teardown), as the last full run gave them."""
    try:
        data = json.loads(table.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def weight(path: str, known: Mapping[str, float]) -> float:
    """How long the file ``path`` (relative to the root, ``tests/...``) is expected to take:
    the table's figure, else the median of its folder's files in the table."""
    if path in known:
        return known[path]
    folder = path.rsplit("/", 1)[0] + "/"
    alike = [s for p, s in known.items() if p.startswith(folder)]
    return statistics.median(alike) if alike else 0.0


def order(items: list[pytest.Item], root: Path, known: Mapping[str, float]) -> None:
    """Sort ``items`` in place: by their file's weight, longest first; stable, so a file's
    tests keep their order and files of equal weight keep collection order."""

    def key(item: pytest.Item) -> float:
        try:
            rel = item.path.relative_to(root).as_posix()
        except ValueError:
            return 0.0
        return -weight(rel, known)

    items.sort(key=key)


def configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # xdist's; this order replaces its by-count one
        config.option.loadscopereorder = False


def modify(config: pytest.Config, items: list[pytest.Item]) -> None:
    order(items, config.rootpath, durations())


def from_junit(reports: Sequence[Path]) -> dict[str, float]:
    """Seconds per test file from pytest's ``--junitxml`` reports (the testcase times, each
    setup + call + teardown), the slowest of the reports for each file."""
    out: dict[str, float] = {}
    for report in reports:
        per: dict[str, float] = {}
        for case in ET.parse(report).iter("testcase"):
            parts = (case.get("classname") or "").split(".")
            mods = [i for i, p in enumerate(parts) if p.startswith("test_")]
            if not mods:
                continue
            path = "/".join(parts[: mods[0] + 1]) + ".py"
            per[path] = per.get(path, 0.0) + float(case.get("time") or 0)
        for path, seconds in per.items():
            out[path] = max(out.get(path, 0.0), seconds)
    return out


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m tests.ordering JUNIT.xml [JUNIT.xml...]  (writes tests/durations.json)")
        return 2
    table = {p: round(s, 1) for p, s in sorted(from_junit([Path(a) for a in argv]).items())}
    TABLE.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n", encoding="utf-8")
    print(f"{TABLE}: {len(table)} files, {sum(table.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
