"""``hetflow logs``: the output of a run's containers, as they write it (``--follow``)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hetflow.cli.common import open_store
from hetflow.cli.shell import complete_runs, complete_steps
from hetflow.errors import UsageError
from hetflow.state import RUN_TERMINAL, RunWatch, executor_gone

if TYPE_CHECKING:
    from hetflow.execute import CachedOrigin, LogSource
    from hetflow.state import AttemptRecord


def register(app: typer.Typer) -> None:
    app.command()(logs)


def logs(
    run_id: str = typer.Argument(..., help="Run id.", autocompletion=complete_runs),
    step: str | None = typer.Argument(
        None,
        help="One step, or a fan-out's items (count: count.0, count.1, ...); default: all.",
        autocompletion=complete_steps,
    ),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
    attempt: int | None = typer.Option(None, "--attempt", help="One attempt (default: all)."),
    rank: int | None = typer.Option(
        None,
        "--rank",
        min=0,
        metavar="N",
        help="One replica of a gang step (default: every replica, lines prefixed \\[rankN]:; an mpi gang's rank 0).",
    ),
) -> None:
    """Print the output of a run's containers: a step's, a fan-out's items', a gang's ranks'."""
    from hetflow.execute import (
        RunPaths,
        attempt_label,
        attempt_sources,
        cached_origin,
        recorded_gangs,
        select_steps,
    )
    from hetflow.report import step_items

    store = open_store()
    rid = store.resolve_run_id(run_id)
    record = store.run(rid)
    wanted, group = select_steps(rid, [s.step for s in store.steps(rid)], step)
    _mask_secrets(record.spec_json)
    gangs = recorded_gangs(record)
    paths = RunPaths(Path(record.workdir))
    offsets: dict[Path, int] = {}
    watch = RunWatch(store, rid)  # the run's event stream says when it ends
    last = False  # the run has ended: one more pass prints what its containers wrote last
    from_cache: set[str] = set()  # steps taken from the cache whose producing run's log was printed
    while True:
        if follow and step is not None:  # a fan-out waiting for its list is one step until it expands into items
            with contextlib.suppress(UsageError):
                wanted, group = select_steps(rid, [s.step for s in store.steps(rid)], step)
        order = {name: i for i, name in enumerate(wanted)}  # a group's items in index order: count.2 before count.10
        shown = [a for a in store.attempts(rid, None if group else step) if a.step in order]
        items = step_items(store.expansions(rid))  # fan-out items' values, for their lines' prefixes
        if group:
            shown.sort(key=lambda a: (order[a.step], a.attempt))
        for a in shown:
            if attempt is not None and a.attempt != attempt:
                continue
            whole = step is None or (attempt is None and not group)
            label = attempt_label(a, group=group, whole=whole, item=items.get(a.step))
            strict = step is not None and not group and not follow  # a missing replica is an error
            _print_sources(attempt_sources(paths, a, gangs, rank=rank, label=label), a, rank, offsets, strict=strict)
        for name in wanted:
            if name not in from_cache and (origin := cached_origin(store, rid, name)) is not None:
                from_cache.add(name)
                _print_cached(name, origin, rank=rank, label=step is None or group, item=items.get(name))
        if not follow or last:
            break
        watch.poll()
        if watch.ended:
            break
        current = store.run(rid)
        # An end the stream did not show yet (written just before its event) ends it too;
        # a killed executor writes no end at all: say so rather than follow for ever.
        last = current.state in RUN_TERMINAL
        if not last and executor_gone(current):
            print(
                f"hetflow: run {rid} can make no progress: its executor (pid {current.pid}) is gone;"
                f" 'hetflow resume {rid}' continues it",
                file=sys.stderr,
                flush=True,
            )
            raise typer.Exit(1)
        time.sleep(0 if last else 0.5)


def _print_cached(step: str, origin: CachedOrigin, *, rank: int | None, label: bool, item: object) -> None:
    """A step taken from the cache ran no container in this run: name the run its result
    came from and print that run's log of it (its accepted attempt's)."""
    from hetflow.execute import RunPaths, attempt_label, attempt_sources, recorded_gangs

    if origin.run is None or origin.attempt is None:
        print(f"hetflow: {step} was taken from the cache of run {origin.run_id}; {origin.missing}", file=sys.stderr)
        return
    a = origin.attempt
    print(
        f"hetflow: {step} was taken from the cache: its result came from run {origin.run_id}"
        f" (attempt {a.attempt}); its log there follows ('hetflow logs {origin.run_id} {step}')",
        file=sys.stderr,
        flush=True,
    )
    prefix = attempt_label(a, group=False, whole=label, item=item)
    paths, gangs = RunPaths(Path(origin.run.workdir)), recorded_gangs(origin.run)
    _print_sources(attempt_sources(paths, a, gangs, rank=rank, label=prefix), a, rank, {}, strict=False)


def _print_sources(
    sources: list[LogSource], a: AttemptRecord, rank: int | None, offsets: dict[Path, int], *, strict: bool
) -> None:
    """Print what each log holds past its offset (kept in ``offsets`` for ``--follow``)."""
    from hetflow.execute import read_lines

    for source in sources:
        if rank and not source.path.exists():
            if strict:
                raise UsageError(f"step {a.step!r} attempt {a.attempt} has no replica {rank}: not a gang this big")
            continue
        lines, offsets[source.path] = read_lines(source.path, offsets.get(source.path, 0))
        for stream, text in lines:
            print(source.prefix + text, file=sys.stderr if stream == "stderr" else sys.stdout, flush=True)


def _mask_secrets(spec_json: str) -> None:
    """Mask what this process knows of the run's secrets (their names as recorded with the run:
    not its file, which may be gone, nor the spec's models; ended attempts' logs are masked already)."""
    from hetflow.execute import activate, gather_available, recorded_secrets

    activate(gather_available(recorded_secrets(spec_json), os.environ))
