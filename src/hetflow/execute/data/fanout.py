"""Fan-outs whose list is known only when a run is submitted (over workflow data) or when
the step they read from has succeeded (over its output): read the list, expand the step
into its items (``spec.expand``), and record the list so a resumed run expands alike."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hetflow.errors import HetflowError
from hetflow.execute.data.fanlist import check_count, list_files, read_lines
from hetflow.execute.data.inputs import DataManifest, Located, NoMemo, data_items, resolve_host
from hetflow.execute.data.paths import RunPaths
from hetflow.spec import (
    DATA_PREFIX,
    FANOUT_SEP,
    LoadedWorkflow,
    Source,
    Workflow,
    expand,
    expand_loaded,
    file_items,
    pending_source,
)
from hetflow.state import FAILED, SUCCEEDED, Store

Expansion = tuple[str, str]  # (step, items as JSON), as the store records it


def expand_at_submit(loaded: LoadedWorkflow, manifest: DataManifest) -> tuple[LoadedWorkflow, list[Expansion]]:
    """Expand every pending fan-out over workflow data."""
    known: dict[str, list[Any]] = {}
    for name, step in loaded.workflow.steps.items():
        src = pending_source(step)
        if src is not None and src.step is None:
            try:
                known[name] = data_items(manifest, src.kind, src.ref)
                check_count(src.kind, src.ref, len(known[name]), "listed at submit")
            except (OSError, HetflowError) as exc:
                raise HetflowError(f"step {name!r}: {exc}") from None
    if not known:
        return loaded, []
    return expand_loaded(loaded, known), [(n, json.dumps(items)) for n, items in known.items()]


def expand_for_planning(loaded: LoadedWorkflow) -> LoadedWorkflow:
    """Fan-outs over host data, expanded from a listing of the files (nothing is hashed or
    downloaded): what ``hetflow plan`` shows.  Fan-outs over S3 data or over an upstream
    step's output stay one step until a run knows their lists."""
    wf = loaded.workflow
    where = Located(loaded.file, lambda loc: loaded.line(*loc))
    wanted = {
        name: src for name, step in wf.steps.items() if (src := pending_source(step)) is not None and src.step is None
    }
    sets = {}
    for src in wanted.values():
        dname = src.ref.removeprefix(DATA_PREFIX).split("/", 1)[0]
        ds = wf.data.get(dname)
        if ds is not None and not ds.is_s3 and dname not in sets:
            sets[dname] = resolve_host(dname, ds, NoMemo(), where, hash_files=False)
    manifest = DataManifest(sets)
    known = {}
    for name, src in wanted.items():
        if src.ref.removeprefix(DATA_PREFIX).split("/", 1)[0] in sets:
            known[name] = data_items(manifest, src.kind, src.ref)
    return expand_loaded(loaded, known) if known else loaded


def replay(loaded: LoadedWorkflow, expansions: Sequence[Expansion]) -> LoadedWorkflow:
    """A recorded run's workflow with its recorded expansions applied, in order."""
    for step, items_json in expansions:
        if step in loaded.workflow.steps:
            loaded = expand_loaded(loaded, {step: json.loads(items_json)})
    return loaded


def read_items(source: Source, out_dir: Path) -> list[Any]:
    """A run-time fan-out's list, from its upstream step's accepted outputs (``out_dir``)."""
    _, _, rel = source.ref.partition("/")
    target = out_dir / rel
    if source.kind == "lines":
        if not target.is_file():
            raise HetflowError(f"foreach lines: {source.ref} is not a file")
        return read_lines(target, source.ref)  # counted as read: no more than the limit + 1
    if target.is_file():
        return file_items(posixpath.dirname(source.ref), [target.name])
    if not target.is_dir():
        raise HetflowError(f"foreach files: {source.ref} is missing")
    return file_items(source.ref, list_files(target, source.ref))


def expand_ready(
    store: Store, run_id: str, wf: Workflow, paths: RunPaths, clock: Callable[[], float]
) -> Iterator[tuple[Workflow, str, list[str]]]:
    """Expand each pending fan-out of ``wf`` whose upstream step has succeeded: read its
    list, record the items in the store, and yield (the workflow with them in the step's
    place, the step, its items' names) for the executor to follow.  A list that cannot be
    read or expanded fails the step, saying why."""
    pending = [(n, src) for n, s in wf.steps.items() if (src := pending_source(s)) and src.step]
    if not pending:
        return
    steps = {s.step: s for s in store.steps(run_id)}
    for name, src in pending:
        assert src.step is not None
        if name not in steps or steps[src.step].state != SUCCEEDED:
            continue
        try:
            items = read_items(src, paths.step_out(src.step))
            expanded, problems = expand(wf, {name: items}, wf.name, lambda loc: 0)
            if problems:
                raise HetflowError("; ".join(p.message for p in problems))
        except (OSError, HetflowError) as exc:
            why = f"cannot expand the fan-out of step {name!r}: {exc}"
            store.set_step(run_id, name, state=FAILED, ended=clock(), reason=why, event=why)
            continue
        names = [f"{name}{FANOUT_SEP}{i}" for i in range(len(items))]
        store.expand_step(run_id, name, names, json.dumps(items))
        wf = expanded
        yield wf, name, names
