"""Tables of many rows: rich lays out every cell of a Table to fit the terminal, which takes
seconds for thousands of rows; past ``BIG`` rows the same columns are written as plain,
left-aligned text (no wrapping, the last column as it is)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

BIG = 300


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Text:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row[:-1]):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells[:-1], widths, strict=False)) + "  " + cells[-1]

    text = Text(line(headers).rstrip(), style="bold", no_wrap=True)
    body = "\n".join(line(r).rstrip() for r in rows)
    if body:
        text.append("\n" + body, style="")
    return text
