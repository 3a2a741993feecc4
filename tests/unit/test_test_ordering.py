"""The suite's own order (tests/ordering.py): the longest files first, a file's tests together."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests import ordering

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.integration.test_long.TestX" name="a" time="40.5"/>
<testcase classname="tests.integration.test_long.TestX" name="b" time="9.5"/>
<testcase classname="tests.integration.test_short" name="c[1]" time="2"/>
<testcase classname="tests.unit.test_quick" name="d" time="0.1"/>
</testsuite></testsuites>"""


def test_from_junit_sums_each_files_tests_and_keeps_the_slowest_report(tmp_path: Path) -> None:
    first, second = tmp_path / "1.xml", tmp_path / "2.xml"
    first.write_text(JUNIT)
    second.write_text(JUNIT.replace('time="2"', 'time="7"').replace('time="40.5"', 'time="1"'))
    assert ordering.from_junit([first, second]) == {
        "tests/integration/test_long.py": 50.0,
        "tests/integration/test_short.py": 7.0,
        "tests/unit/test_quick.py": 0.1,
    }


def test_longest_files_first_a_files_tests_kept_together_and_in_order(tmp_path: Path) -> None:
    known = {
        "tests/integration/test_long.py": 50.0,
        "tests/integration/test_short.py": 7.0,
        "tests/unit/test_a.py": 1.0,
    }
    names = [
        "tests/unit/test_a.py::x",
        "tests/integration/test_new.py::n1",  # not in the table: its folder's median (28.5 s)
        "tests/integration/test_short.py::s1",
        "tests/integration/test_long.py::l1",
        "tests/integration/test_short.py::s2",
        "tests/integration/test_long.py::l2",
        "tests/unit/test_b.py::y",
    ]
    items: list[Any] = [SimpleNamespace(path=tmp_path / n.split("::")[0], name=n) for n in names]
    ordering.order(items, tmp_path, known)
    assert [i.name for i in items] == [
        "tests/integration/test_long.py::l1",
        "tests/integration/test_long.py::l2",
        "tests/integration/test_new.py::n1",
        "tests/integration/test_short.py::s1",
        "tests/integration/test_short.py::s2",
        "tests/unit/test_a.py::x",
        "tests/unit/test_b.py::y",
    ]


def test_the_table_names_files_that_exist() -> None:
    root = Path(__file__).resolve().parents[2]
    table = ordering.durations()
    assert table, ordering.TABLE
    gone = [p for p in table if not (root / p).is_file()]
    assert not gone, f"{ordering.TABLE} names files that are gone (python -m tests.ordering JUNIT.xml): {gone}"
