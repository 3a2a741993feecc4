"""Tables of many rows: rich lays out every cell of a Table to fit the terminal, which takes
seconds for thousands of rows; past ``BIG`` rows the same columns are written as plain,
left-aligned lines (not wrapped, the last column as it is)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.style import Style

BIG = 300


class PlainTable:
    """A renderable of ready-made lines, the header bold; rich prints it as it is."""

    def __init__(self, header: str, lines: list[str]) -> None:
        self.header, self.lines = header, lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        yield Segment(self.header, Style(bold=True))
        yield Segment.line()
        for line in self.lines:
            yield Segment(line)
            yield Segment.line()

    @property
    def plain(self) -> str:
        return "\n".join([self.header, *self.lines])


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> PlainTable:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return ("  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)) + "  " + cells[-1]).rstrip()

    return PlainTable(line(headers), [line(r) for r in rows])


def print_table(out: Console, table: Any) -> None:
    """``out.print(table)``; a ``PlainTable`` for a console that writes no styles (not a
    terminal, no colour, not recording) is written as its text instead, which is what rich
    writes when every line is printable ASCII within the console's width (nothing to crop or
    measure): 10,000 rows without rich's segments (issue 43: 25-30 ms of CPU)."""
    if isinstance(table, PlainTable) and not out.is_terminal and out.color_system is None and not out.record:
        width = out.width  # a property rich works out on each read
        text = table.plain
        lines = [table.header, *table.lines]
        if text.isascii() and all(len(line) <= width and line.isprintable() for line in lines):
            out.file.write(text + "\n")
            out.file.flush()
            return
    out.print(table)
