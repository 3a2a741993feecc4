"""bench.conformance.table over JUnit files cwltest really wrote (tests/unit/data/conformance):
counts per tag, unsupported apart from failed, a runner that is not installed, and the
relabelling that ``-n`` runs need."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.conformance.table import (
    ALL,
    Column,
    Counts,
    JunitError,
    SuiteTest,
    read_junit,
    relabel,
    render,
    required_line,
    summary,
    tally,
)

DATA = Path(__file__).parent / "data" / "conformance"
MIXED = DATA / "tags-env-network.xml"  # 3 passed, envvar_req failed, 2 networkaccess unsupported
NUMBERS = DATA / "numbers-1-226.xml"  # -n 1,226 against a runner that always exits 33


def test_reads_each_case_with_its_tags_and_outcome() -> None:
    cases = {case.name: case for case in read_junit(MIXED)}
    assert {name: case.outcome for name, case in cases.items()} == {
        "envvar_req": "failed",
        "requirement_priority": "passed",
        "requirement_override_hints": "passed",
        "requirement_workflow_steps": "passed",
        "networkaccess": "unsupported",
        "networkaccess_disabled": "unsupported",
    }
    assert cases["networkaccess_disabled"].tags == ("networkaccess", "command_line_tool", "inputs_should_parse")
    assert "returned non-zero exit status 1" in cases["envvar_req"].message


@pytest.mark.parametrize(
    ("tag", "passed", "failed", "unsupported"),
    [
        ("env_var", 3, 1, 0),
        ("networkaccess", 0, 0, 2),
        ("command_line_tool", 0, 1, 2),
        ("workflow", 3, 0, 0),
        ("inputs_should_parse", 0, 0, 1),
        (ALL, 3, 1, 2),
    ],
    ids=["env_var", "networkaccess", "command_line_tool", "workflow", "one-test-tag", "all"],
)
def test_counts_per_tag(tag: str, passed: int, failed: int, unsupported: int) -> None:
    assert tally(read_junit(MIXED))[tag] == Counts(passed, failed, unsupported)


def test_a_required_test_that_says_unsupported_is_a_failure() -> None:
    first, second = read_junit(NUMBERS)
    assert (first.name, first.outcome) == ("cl_basic_generation", "failed")
    assert "exit status 33" in first.message
    assert second.outcome == "unsupported"


def test_relabel_gives_an_n_run_its_real_tests() -> None:
    cases = read_junit(NUMBERS)
    assert cases[1].name == "nested_prefixes_arrays"  # cwltest's label: the suite's 2nd test
    real = [SuiteTest("cl_basic_generation", ("required", "command_line_tool")),
            SuiteTest("networkaccess", ("command_line_tool", "networkaccess"))]  # fmt: skip
    counts = tally(relabel(cases, real))
    assert counts["required"] == Counts(failed=1)
    assert counts["networkaccess"] == Counts(unsupported=1)


def test_relabel_refuses_a_run_that_did_not_finish() -> None:
    with pytest.raises(JunitError, match="2 results for 3 selected tests"):
        relabel(read_junit(NUMBERS), [SuiteTest("a", ()), SuiteTest("b", ()), SuiteTest("c", ())])


def test_a_missing_runner_is_a_column_that_says_so_not_an_error() -> None:
    columns = [Column.absent("hetflow", "runner not installed"), Column.of("cwltool", read_junit(MIXED), 12.5)]
    text = render(columns)
    rows = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert "runner not installed" in rows["env_var"]
    assert rows["env_var"].split()[-1] == "3/1/0"
    assert rows["all"].split()[1] == "6"
    assert required_line(columns) == "required: hetflow runner not installed, cwltool 0/0 passed"
    assert text.endswith("\nwall time: cwltool 12 s")  # 12.5 s, rounded half to even
    data = json.loads(json.dumps(summary(columns, {"date": "d"})))
    assert data["runners"]["hetflow"] == {"missing": "runner not installed"}
    assert data["runners"]["cwltool"]["tags"]["networkaccess"] == {
        "total": 2, "passed": 0, "failed": 0, "unsupported": 2,
    }  # fmt: skip
    assert data["runners"]["cwltool"]["failed"] == ["envvar_req"]
    assert data["runners"]["cwltool"]["unsupported"] == ["networkaccess", "networkaccess_disabled"]


def test_the_table_lists_required_first_and_all_last() -> None:
    both = [Column.of("hetflow", read_junit(NUMBERS)), Column.of("cwltool", read_junit(MIXED))]
    table, _, tail = render(both).partition("\n\n")
    tags = [line.split()[0] for line in table.splitlines()[2:]]
    assert tags[0] == "required" and tags[-1] == ALL
    assert tags[1:-1] == sorted(tags[1:-1])
    assert tail == "required: hetflow 0/2 passed, cwltool 0/0 passed"


def test_a_file_that_is_not_junit_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "cwltool.xml"
    bad.write_text("<testsuites><testcase")
    with pytest.raises(JunitError, match=r"cwltool\.xml: not a readable JUnit XML file"):
        read_junit(bad)
