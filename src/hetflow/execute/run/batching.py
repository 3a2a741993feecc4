"""Batches: several small items of a fan-out run one after another in one container.

A container's start and removal cost podman about 0.2-0.4 s; an item that echoes a line
costs a few milliseconds.  So items of a wide fan-out (``spec.fields.batch``) run several to a
container, as Nextflow's ``array`` and Snakemake's job groups pack tasks into one job.  A
batch is only how items are started: each item keeps its own attempt row (whose container
is the batch's), exit code, log, outputs, cache entry and retries.

The batch's folder (``RunPaths.batch``), mounted at ``/.hetflow/batch``, holds ``order``
(one item key ``STEP.ATTEMPT`` a line), ``items/KEY.sh`` (the item's environment and its
command, quoted for ``sh``) and the entry ``run``, a POSIX shell script: the image needs
nothing beyond ``sh``.  For each item in turn the entry empties ``/out`` and ``/tmp`` (``rm``
only when something is there), marks ``start/KEY``, runs the item in a subshell that sources its
script (its ``exec`` replaces the subshell: no second ``sh`` started per item) with its output in
``log/KEY`` (as podman's k8s-file log driver writes a container's, stdout and stderr together,
one timestamp an item, read when its first line comes), copies ``/out`` to ``out/KEY`` and
writes the exit code to ``rc/KEY`` (renamed into place: an ``rc`` file is whole).  The
executor reads those files on every poll (``item_state``): an item with an ``rc`` is over, its
log is moved to the attempt's own (``collect``) and it is settled as a container of its own
would be, its outputs renamed into place from ``out/KEY`` (a failed item's are moved to its
attempt's staging folder, as any failed attempt's are kept).  An item the batch
never started (the batch was stopped, or its node failed) is requeued, outside its retries;
one the batch was running when it died failed with the batch's exit code.  An entry finds
its items done already (``rc``) and skips them, so a batch restored or adopted never runs an
item twice.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from hetflow.execute.backends.base import JobState
from hetflow.execute.data.fencing import discarded_file
from hetflow.execute.data.paths import RunPaths, container_name
from hetflow.execute.engine import ContainerSpec, Mount
from hetflow.kube import LABEL_ATTEMPT, LABEL_STEP
from hetflow.spec import AUTO_BATCH, AUTO_MAX_ESTIMATE, AUTO_MIN_ITEMS, Batch, Step, Workflow, fanout_parent
from hetflow.state import Store

SUFFIX = "-batch"  # a batch container's name: its first item's container name and this
MOUNT = "/.hetflow/batch"  # where the batch's folder is in its container
PER_ITEM_ENV = ("HETFLOW_STEP", "HETFLOW_ATTEMPT")

ENTRY = """\
#!/bin/sh
# hetflow's batch entry: each item of the batch in turn, with its own log, exit code and /out.
b=/.hetflow/batch
failed=0
while IFS= read -r k; do
  [ -e "$b/rc/$k" ] && continue
  set -- /out/* /out/.[!.]* /out/..?* /tmp/* /tmp/.[!.]* /tmp/..?*
  for f in "$@"; do
    if [ -e "$f" ] || [ -L "$f" ]; then rm -rf "$@" 2>/dev/null; break; fi
  done
  : > "$b/start/$k"
  { ( . "$b/items/$k.sh" ) < /dev/null; echo "$?" > "$b/rc/.$k"; } 2>&1 | {
    ts=
    while IFS= read -r line || [ -n "$line" ]; do
      [ -n "$ts" ] || ts=$(date -u +%Y-%m-%dT%H:%M:%S.000000000+00:00)
      printf '%s stdout F %s\n' "$ts" "$line"
    done > "$b/log/$k"
  }
  read -r rc < "$b/rc/.$k"
  mkdir -p "$b/out/$k" && cp -a /out/. "$b/out/$k/" 2>/dev/null
  mv "$b/rc/.$k" "$b/rc/$k"
  [ "$rc" -eq 0 ] || failed=1
done < "$b/order"
exit $failed
"""


def is_batch(container: str) -> bool:
    return container.endswith(SUFFIX)


def batch_name(run_id: str, first: str, attempt: int) -> str:
    return container_name(run_id, first, attempt) + SUFFIX


def key(step: str, attempt: int) -> str:
    return f"{step}.{attempt}"


class Policy:
    """Which steps run batched, and how many items to a container (``spec.fields.batch``).
    ``entrypoint``: the image's ENTRYPOINT, where the engine can say (None: it cannot); an
    item runs its command with none, so a step is batched by default only when its image
    has none either."""

    def __init__(self, workflow: Workflow, entrypoint: Callable[[str], tuple[str, ...] | None] | None = None) -> None:
        self._widths: dict[str, int] = {}
        self._entrypoint = entrypoint
        self._entrypoints: dict[str, tuple[str, ...] | None] = {}
        self.set_workflow(workflow)

    def set_workflow(self, workflow: Workflow) -> None:
        widths: dict[str, int] = {}
        for name in workflow.steps:
            parent = fanout_parent(name)
            if parent is not None:
                widths[parent] = widths.get(parent, 0) + 1
        self._widths = widths

    def width(self, parent: str) -> int:
        """The items of fan-out ``parent``."""
        return self._widths.get(parent, 0)

    def of(self, name: str, step: Step) -> Batch | None:
        """The step's batching, None when it runs in a container of its own: not an item of
        a fan-out, ``batch: false``, or short of what a batch needs (one command run by
        ``sh``, no gang, no GPUs, no secrets: a secret never goes into a file; no checkpoint:
        one is of one container's processes)."""
        parent = fanout_parent(name)
        if parent is None or step.batch is False or step.replicas > 1 or step.secrets or step.checkpoint:
            return None
        if isinstance(step.batch, Batch):
            return step.batch
        estimate = step.estimate
        if estimate is None or estimate > AUTO_MAX_ESTIMATE or self._widths.get(parent, 0) < AUTO_MIN_ITEMS:
            return None
        images = {v.image for v in step.resolved_variants().values()}
        return AUTO_BATCH if all(self._no_entrypoint(i) for i in images) else None

    def _no_entrypoint(self, image: str) -> bool:
        if self._entrypoint is None:
            return False
        if image not in self._entrypoints:
            self._entrypoints[image] = self._entrypoint(image)
        return self._entrypoints[image] == ()


@dataclass(frozen=True)
class Item:
    """One item of a batch: its step, attempt and container as it would run alone."""

    step: str
    attempt: int
    spec: ContainerSpec


def item_script(spec: ContainerSpec) -> str:
    """The item's environment and command, for ``sh``."""
    lines = [f"export {k}={shlex.quote(v)}" for k, v in sorted(spec.env.items())]
    lines.append("exec " + " ".join(shlex.quote(a) for a in spec.command))
    return "\n".join(lines) + "\n"


def write_batch(paths: RunPaths, name: str, items: Sequence[Item], owner: tuple[int, int]) -> Path:
    """Lay out the batch's folder (entry, order, item scripts; the folders the container
    writes, owned by the run's user) and point each item's log at the file the entry writes."""
    d = paths.batch(name)
    for sub in ("items", "rc", "start", "log", "out", "scratch"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for sub in ("rc", "start", "log", "out", "scratch"):
        os.chown(d / sub, *owner)
    (d / "run").write_text(ENTRY)
    logs = paths.log(items[0].step, items[0].attempt).parent  # the run's logs, every item's in it
    logs.mkdir(parents=True, exist_ok=True)
    there = os.path.relpath(d / "log", logs)
    for it in items:
        k = key(it.step, it.attempt)
        (d / "items" / f"{k}.sh").write_text(item_script(it.spec))
        log = paths.log(it.step, it.attempt)
        with contextlib.suppress(FileNotFoundError):
            log.unlink()
        os.symlink(f"{there}/{k}", log)  # `hetflow logs` reads it as it grows
    (d / "order").write_text("".join(key(it.step, it.attempt) + "\n" for it in items))
    return d


def batch_spec(first: ContainerSpec, name: str, folder: Path, step: str) -> ContainerSpec:
    """The batch's container: the first item's (image, user, limits, hardening, inputs) with
    the entry as its command, its own /out scratch and the batch's folder."""
    mounts = [m for m in first.mounts if m.target != "/out"]
    mounts += [Mount(str(folder / "scratch"), "/out", read_only=False), Mount(str(folder), MOUNT, read_only=False)]
    env = {k: v for k, v in first.env.items() if k not in PER_ITEM_ENV}
    return replace(
        first,
        name=name,
        entrypoint=("sh",),  # the image's own ENTRYPOINT would be handed the entry as arguments
        command=(f"{MOUNT}/run",),
        env=env,
        labels={**first.labels, LABEL_STEP: step, LABEL_ATTEMPT: "1"},  # the run's label as the items'
        mounts=tuple(mounts),
        log_path=str(folder / "batch.log"),
    )


def shape(s: ContainerSpec) -> ContainerSpec:
    """An item's container less what items of one batch may differ in: their command,
    environment, /out, log and name (``same_container``; a batch's first item's, made once)."""
    mounts = tuple(m for m in s.mounts if m.target != "/out")
    return replace(s, name="", command=(), env={}, labels={}, log_path=None, mounts=mounts)


def same_container(a: ContainerSpec, b: ContainerSpec) -> bool:
    """Whether two items can share a container: all but their command, environment, /out,
    log and name alike."""
    return shape(a) == shape(b)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None


def held_outputs(paths: RunPaths, container: str, step: str, attempt: int) -> Path | None:
    """Where a finished item's outputs wait in its batch's folder (None: not there).  An item
    that exited 0 has its outputs renamed from there into place: no staging folder is made
    and removed for it (removing a folder costs ext4 a journalled orphan-list update, about
    1 ms here, more than the rest of accepting a small item's outputs)."""
    out = paths.batch(container) / "out" / key(step, attempt)
    return out if out.is_dir() else None


def stage(paths: RunPaths, container: str, step: str, attempt: int) -> None:
    """Move an item's outputs from its batch's folder to its attempt's staging folder, where
    a failed attempt's are kept, with the mark a refused rename left beside them (``fencing``;
    ``Attempts.fail`` stages an item at once).  Done again after a crash, it does nothing."""
    out = held_outputs(paths, container, step, attempt)
    staging = paths.staging(step, attempt)
    if out is not None and not staging.exists():
        staging.parent.mkdir(parents=True, exist_ok=True)
        os.replace(out, staging)
        with contextlib.suppress(FileNotFoundError):
            os.replace(discarded_file(out), discarded_file(staging))


def collect(paths: RunPaths, container: str, step: str, attempt: int, code: int) -> None:
    """A finished item: its log (over the link made at launch) to its attempt's log; a failed
    item's outputs to its attempt's staging folder (``stage``).  Done again, it does nothing."""
    if code != 0:
        stage(paths, container, step, attempt)
    log = paths.batch(container) / "log" / key(step, attempt)
    if log.exists():
        os.replace(log, paths.log(step, attempt))


def item_state(paths: RunPaths, step: str, attempt: int, container: str, batch: JobState | None) -> JobState | None:
    """What the engine would say of the item if it were a container of its own, from its
    batch's folder and the batch container's state (None: no trace of either)."""
    folder = paths.batch(container)
    k = key(step, attempt)
    node = batch.node if batch is not None else None
    try:
        code = int((folder / "rc" / k).read_text().strip())
    except (FileNotFoundError, ValueError):
        code = None
    if code is not None:
        collect(paths, container, step, attempt, code)
        started, ended = _mtime(folder / "start" / k), _mtime(folder / "rc" / k)
        return JobState(container, False, code, "exited", node=node, started=started, ended=ended)
    if batch is not None and batch.running:
        return replace(batch, started=_mtime(folder / "start" / k), ended=None)
    began = (folder / "start" / k).exists()
    if batch is None and not began:
        return None
    if began:
        said = f": {batch.reason}" if batch is not None and batch.reason else ""
        why = f"its batch container {container} ended while it ran{said}"
        code = batch.exit_code if batch is not None and batch.exit_code else 255
        return JobState(
            container,
            False,
            code,
            batch.status if batch else "gone",
            node=node,
            reason=why,
            node_failed=batch.node_failed if batch else False,
        )
    assert batch is not None
    why = f"its batch container {container} ended ({batch.status}) before it ran"
    return JobState(container, False, None, batch.status, node=node, reason=why, dependency_failed=True)


def note_start(store: Store, run_id: str, step: str, attempt: int, st: JobState) -> float | None:
    """Record when a finished item of a batch began and ended (its batch began before it: the
    trace's realtime is the item's own); returns its end."""
    if st.started is not None:
        store.set_attempt(run_id, step, attempt, run_started=st.started, run_ended=st.ended)
        store.set_step(run_id, step, started=st.started)
    return st.ended


def refine(paths: RunPaths, states: Mapping[str, JobState], step: str, attempt: int, container: str) -> JobState | None:
    """``states[container]``, or for an item of a batch, the item's own state."""
    if not is_batch(container):
        return states.get(container)
    return item_state(paths, step, attempt, container, states.get(container))


def batch_notes(workflow: Workflow, entrypoint: Callable[[str], tuple[str, ...] | None] | None = None) -> list[str]:
    """One line for each fan-out whose items run batched (``hetflow plan --explain``)."""
    policy = Policy(workflow, entrypoint)
    notes: dict[str, str] = {}
    for name, step in workflow.steps.items():
        parent = fanout_parent(name)
        batch = policy.of(name, step) if parent is not None and parent not in notes else None
        if parent is None or batch is None:
            continue
        how = "its batch" if isinstance(step.batch, Batch) else "automatic for a wide fan-out of short items"
        notes[parent] = (
            f"{parent}: {policy.width(parent)} items run up to {batch.size(step.estimate)} to a container "
            f"({how}: {batch.describe()}); each keeps its own attempt, log, outputs and retries"
        )
    return list(notes.values())
