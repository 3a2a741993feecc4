"""``print_table`` writes what rich's ``Console.print`` writes, plain tables of many rows
without rich's segments where that is the same text, rich's way elsewhere."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from hetflow.report import print_table
from hetflow.report.tables import plain_table

ROWS = [[f"work.{i}", "succeeded", f"{i * 1.5:.1f}", f"cached: from run abc (key {i:012x})"] for i in range(400)]


def _printed(how: str, rows: list[list[str]], **console: object) -> str:
    buffer = io.StringIO()
    out = Console(file=buffer, width=200, **console)  # type: ignore[arg-type]
    table = plain_table(["STEP", "STATE", "TOOK", "WHY"], rows)
    if how == "rich":
        out.print(table)
    else:
        print_table(out, table)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "rows",
    [
        ROWS,
        [*ROWS, ["long", "failed", "1.0", "x" * 300]],  # past the width: rich crops it
        [*ROWS, ["wide", "failed", "1.0", "ошибка 文字"]],  # cells wider than their length
        [*ROWS, ["tab", "failed", "1.0", "a\tb"]],
    ],
    ids=["plain", "long-line", "not-ascii", "control"],
)
@pytest.mark.parametrize("console", [{}, {"force_terminal": True}, {"record": True}], ids=["pipe", "tty", "record"])
def test_print_table_writes_what_rich_writes(rows: list[list[str]], console: dict[str, object]) -> None:
    assert _printed("print_table", rows, **console) == _printed("rich", rows, **console)


def test_a_plain_table_to_a_pipe_is_its_text() -> None:
    assert _printed("print_table", ROWS).splitlines()[1].startswith("work.0 ")
