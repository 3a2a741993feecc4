"""The conformance table, pure: cwltest's JUnit XML in, passed / failed / unsupported per tag out,
for each runner side by side, as text and as JSON.

cwltest (cwltest/utils.py, ``parse_results``) writes one ``<testcase>`` per test, in the order
it ran them: ``class`` holds the test's tags joined by ", ", ``file`` its short name, and
``url`` "cwltest:SUITE#N".  A failed test has a ``<failure>`` child; a test whose runner
exited 33 (UNSUPPORTED_FEATURE) on a test not tagged ``required`` has ``<skipped
message="Unsupported">``; a ``required`` test that exits 33 is a failure.  A runner that is
not installed gets a column that says so instead of counts.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

Outcome = Literal["passed", "failed", "unsupported"]
ALL = "all"
REQUIRED = "required"


@dataclass(frozen=True)
class Case:
    """One test's result: its short name, tags and outcome (with cwltest's message)."""

    name: str
    tags: tuple[str, ...]
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True)
class SuiteTest:
    """What the suite says of one test, for ``relabel``."""

    name: str
    tags: tuple[str, ...]


@dataclass
class Counts:
    """Tests of one tag: how many passed, failed and were unsupported."""

    passed: int = 0
    failed: int = 0
    unsupported: int = 0

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.unsupported

    def add(self, outcome: Outcome) -> None:
        setattr(self, outcome, getattr(self, outcome) + 1)


@dataclass(frozen=True)
class Column:
    """One runner's results, or why there are none (``missing``: "runner not installed")."""

    runner: str
    cases: tuple[Case, ...] = ()
    missing: str = ""
    seconds: float | None = None
    counts: dict[str, Counts] = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, runner: str, cases: Iterable[Case], seconds: float | None = None) -> Column:
        cases = tuple(cases)
        return cls(runner, cases, "", seconds, tally(cases))

    @classmethod
    def absent(cls, runner: str, why: str) -> Column:
        return cls(runner, (), why)


class JunitError(ValueError):
    """A JUnit file that is not cwltest's: says which file and what is wrong."""


def read_junit(path: Path) -> list[Case]:
    """The cases of one cwltest ``--junit-xml`` file, in the order they ran."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise JunitError(f"{path}: not a readable JUnit XML file ({exc})") from exc
    cases = []
    for element in root.iter("testcase"):
        tags = tuple(t.strip() for t in element.get("class", REQUIRED).split(",") if t.strip())
        outcome: Outcome = "passed"
        message = ""
        for child in element:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", child.get("message") or (child.text or "").strip()
            elif child.tag == "skipped" and outcome == "passed":
                outcome, message = "unsupported", child.get("message") or ""
        cases.append(Case(element.get("file") or element.get("name") or "?", tags, outcome, message))
    return cases


def relabel(cases: Sequence[Case], tests: Sequence[SuiteTest]) -> list[Case]:
    """Give each case the name and tags of the test that really ran in its place.

    cwltest run with ``-n``/``-s`` labels its k-th result with the suite's k-th test
    (``parse_results(results, tests, ...)`` pairs them by position), not the test it ran;
    ``tests`` are the ones it ran, in order."""
    if len(cases) != len(tests):
        raise JunitError(f"{len(cases)} results for {len(tests)} selected tests: the run did not finish")
    return [replace(case, name=info.name, tags=info.tags) for case, info in zip(cases, tests, strict=True)]


def tally(cases: Iterable[Case]) -> dict[str, Counts]:
    """Counts per tag, plus ``ALL`` over every case."""
    counts: dict[str, Counts] = {}
    for case in cases:
        for tag in (*case.tags, ALL):
            counts.setdefault(tag, Counts()).add(case.outcome)
    return counts


def _tags(columns: Sequence[Column]) -> list[str]:
    """Every tag any column has, ``required`` first and ``all`` last, the rest by name."""
    seen = {tag for column in columns for tag in column.counts} - {REQUIRED, ALL}
    return [t for t in (REQUIRED,) if any(t in c.counts for c in columns)] + sorted(seen) + [ALL]


def summary(columns: Sequence[Column], meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON form: per runner, per tag counts, and the failed and unsupported tests by name."""
    runners: dict[str, Any] = {}
    for column in columns:
        if column.missing:
            runners[column.runner] = {"missing": column.missing}
            continue
        runners[column.runner] = {
            "seconds": column.seconds,
            "tags": {
                tag: {"total": c.total, "passed": c.passed, "failed": c.failed, "unsupported": c.unsupported}
                for tag, c in sorted(column.counts.items())
            },
            "failed": sorted(case.name for case in column.cases if case.outcome == "failed"),
            "unsupported": sorted(case.name for case in column.cases if case.outcome == "unsupported"),
        }
    return {**(meta or {}), "runners": runners}


def _cell(column: Column, tag: str) -> str:
    if column.missing:
        return column.missing
    c = column.counts.get(tag)
    return "-" if c is None else f"{c.passed}/{c.failed}/{c.unsupported}"


def render(columns: Sequence[Column]) -> str:
    """The text table: one row per tag, one "passed/failed/unsupported" cell per runner, and
    the required-tag line under it."""
    tags = _tags(columns)
    header = ["tag", "tests", *(f"{c.runner} pass/fail/unsup" for c in columns)]
    rows = []
    for tag in tags:
        totals = {c.counts[tag].total for c in columns if tag in c.counts}
        rows.append([tag, "/".join(str(t) for t in sorted(totals)) or "-", *(_cell(c, tag) for c in columns)])
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    timed = [f"{c.runner} {c.seconds:.0f} s" for c in columns if c.seconds is not None]
    return "\n".join([*lines, "", required_line(columns), *(["wall time: " + ", ".join(timed)] if timed else [])])


def required_line(columns: Sequence[Column]) -> str:
    """The required-tag line, e.g. "required: hetflow 80/84 passed, cwltool 84/84 passed"."""
    parts = []
    for column in columns:
        if column.missing:
            parts.append(f"{column.runner} {column.missing}")
            continue
        c = column.counts.get(REQUIRED, Counts())
        parts.append(f"{column.runner} {c.passed}/{c.total} passed")
    return f"{REQUIRED}: " + ", ".join(parts)
