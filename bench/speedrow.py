"""One row of issue 43's speed table, printed by the bench that measured it.

A bench calls ``emit(...)`` once per target it measures.  The row is printed (``speed row:``
and its figures) and, when ``HETFLOW_SPEED_ROWS`` names a file (``bench.speed`` sets it), also
appended there as one JSON line, so ``python -m bench.speed`` can print every target's row
with its anchor from the same run in one table.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Row:
    """A target's figure, its anchor measured in the same run, and whether it is met."""

    target: str  # what issue 43 asks, in its words ("validate under 0.3 s")
    figure: float  # hetflow's figure (seconds, or a ratio when ``unit`` says so)
    unit: str  # "s" or "x"
    anchor_name: str  # what the anchor is ("podman ps", "plain HEFT", "podman run loop")
    anchor: float | None  # the anchor's figure from the same run (None: an absolute target)
    limit: float  # the target's bound on ``figure``
    bench: str  # the command that measured it

    @property
    def met(self) -> bool:
        return self.figure <= self.limit

    def line(self) -> str:
        anchor = "" if self.anchor is None else f", {self.anchor_name} {self.anchor:.3f}"
        return (
            f"speed row: {self.target}: {self.figure:.3f}{self.unit}{anchor}"
            f" (limit {self.limit:g}{self.unit}: {'met' if self.met else 'not met'})"
        )


def emit(row: Row) -> None:
    """Print the row, and append it to ``$HETFLOW_SPEED_ROWS`` when that is set."""
    print(row.line(), flush=True)
    path = os.environ.get("HETFLOW_SPEED_ROWS")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(asdict(row)) + "\n")


def load(path: str) -> list[Row]:
    """The rows a run of benches appended to ``path``, in order."""
    try:
        with open(path, encoding="utf-8") as rows:
            return [Row(**json.loads(line)) for line in rows if line.strip()]
    except FileNotFoundError:
        return []
