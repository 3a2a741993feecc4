"""Live progress of a run: a rich display on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from hetflow.report.items import item_label
from hetflow.report.runs import gpus_text, steps_table, when
from hetflow.spec import step_label
from hetflow.state import PENDING, QUEUED, STEP_TERMINAL, SUCCEEDED, RunRecord, StepRecord

LIVE_ROWS = 40
Items = Callable[[str], Mapping[str, Any]]  # a run's fan-out items' values by step (``report.items.step_items``)


class _ItemCache:
    """The run's items' values, read again only when its steps grew (a fan-out expanded)."""

    def __init__(self, items: Items | None) -> None:
        self.items, self.seen = items, -1
        self.values: Mapping[str, Any] = {}

    def of(self, run: RunRecord, steps: list[StepRecord]) -> Mapping[str, Any]:
        if self.items is not None and len(steps) != self.seen:
            self.seen, self.values = len(steps), self.items(run.id)
        return self.values


class LiveReporter:
    """A row per step (state, variant, GPUs, elapsed) under a bar for the whole run."""

    def __init__(self, console: Console, items: Items | None = None) -> None:
        self.console = console
        self.items = _ItemCache(items)
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        self.task = self.progress.add_task("run", total=None)
        self.live: Live | None = None

    def update(self, run: RunRecord, steps: list[StepRecord]) -> None:
        done = sum(s.state in STEP_TERMINAL for s in steps)
        self.progress.update(self.task, description=f"{run.name} {run.id}", total=len(steps), completed=done)
        labels = {step: item_label(item) for step, item in self.items.of(run, steps).items()}
        body = Group(self.progress, *self._rows(steps, labels))
        if self.live is None:
            self.live = Live(body, console=self.console, refresh_per_second=8, transient=False)
            self.live.start()
        else:
            self.live.update(body)

    @staticmethod
    def _rows(steps: list[StepRecord], items: Mapping[str, str]) -> list[RenderableType]:
        """Every step of a small run; of a big one (a fan-out of hundreds) the steps under
        way or in trouble, and a count of the rest, so the display stays a screenful."""
        if len(steps) <= LIVE_ROWS:
            return [steps_table(steps, reasons=False, items=items or None)]
        shown = [s for s in steps if s.state not in (PENDING, SUCCEEDED)][:LIVE_ROWS]
        counts = Counter(s.state for s in steps)
        rest = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
        return [
            steps_table(shown, reasons=False, items=items or None),
            Text(f"{len(steps)} steps: {rest}", style="dim"),
        ]

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


class PlainReporter:
    """One line per step state change, for logs and pipes."""

    def __init__(self, out: TextIO | None = None, items: Items | None = None) -> None:
        self.out = out or sys.stdout
        self.seen: dict[str, tuple[str, int, str]] = {}
        self.items = _ItemCache(items)

    def update(self, run: RunRecord, steps: list[StepRecord]) -> None:
        """A line per step changed since the last update, written together (one write and one
        flush: a cached rerun of 10,000 steps changes them all in one update)."""
        values = self.items.of(run, steps)
        lines: list[str] = []
        for s in steps:
            # queued -> running is a change worth a line, and so is what a queued job waits for
            # (Slurm's Reason: Dependency, Priority, Resources; Ray's), not each parent that ended
            key = (s.shown_state, s.attempts, s.reason.partition(" for ")[0] if s.shown_state == QUEUED else "")
            if self.seen.get(s.step) == key:
                continue
            self.seen[s.step] = key
            stamp = time.strftime("%H:%M:%S")
            extra = ""
            if s.shown_state == QUEUED:
                extra = f" attempt={s.attempts} ({s.reason})"
            elif s.state in ("launching", "running"):
                extra = f" variant={s.variant} gpus={gpus_text(s.gpus)} attempt={s.attempts}"
                # when the engine started it (a cluster's job may have started before this look)
                extra += f" started={when(s.started)[11:]}" if s.started and s.state == "running" else ""
            elif s.reason and s.state in ("waiting", "failed", "skipped"):
                extra = f" ({s.reason})"
            # an item by its index and values (qc[0 sample=a]), as the log prefixes name it
            lines.append(f"{stamp} {run.id} {step_label(s.step, values.get(s.step))}: {s.shown_state}{extra}\n")
        if lines:
            self.out.write("".join(lines))
            self.out.flush()

    def close(self) -> None:
        pass


def make_reporter(
    console: Console, quiet: bool = False, items: Items | None = None
) -> LiveReporter | PlainReporter | None:
    """``items``: the run's fan-out items' values by step, to name each item with them."""
    if quiet:
        return None
    return LiveReporter(console, items) if console.is_terminal else PlainReporter(items=items)
