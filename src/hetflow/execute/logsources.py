"""Which container logs ``hetflow logs`` prints, and the prefix of each one's lines.

A name is a step, or a fan-out group (``count`` for its items ``count.0``, ``count.1``, ...:
every item, each line prefixed with the item's name, as ``kubectl logs -l ... --prefix``
names the pod, with its values: ``count[2 sample=a] | ``).  A gang step's replicas each have
a log (``RunPaths.rank_log``); unless
``--rank`` picks one, every replica's lines are shown, prefixed ``[rank1]:`` as torchrun
prefixes a worker's lines (torch.distributed.elastic ``--log-line-prefix-template``
default).  An ``mpi`` gang shows rank 0 only by default: ``mpirun`` in replica 0 gathers
every rank's output there, and the other replicas run only sshd.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hetflow.errors import StateError, UsageError
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.control.recorded import recorded_steps
from hetflow.spec import fanout_parent, step_label
from hetflow.state import SUCCEEDED, AttemptRecord, RunRecord, Store


@dataclass(frozen=True)
class LogSource:
    """One container's log and what to put before each of its lines."""

    path: Path
    prefix: str


@dataclass(frozen=True)
class GangShape:
    replicas: int
    launcher: str  # torch, mpi, none (spec.Gang.launcher)


def select_steps(run_id: str, names: Sequence[str], name: str | None) -> tuple[list[str], bool]:
    """The steps ``name`` means (every step for None) and whether it is a fan-out group."""
    if name is None:
        return list(names), False
    if name in names:
        return [name], False
    items = [n for n in names if fanout_parent(n) == name]
    if items:
        return sorted(items, key=_item_index), True
    from hetflow.spec import did_you_mean  # with the spec's models: only when the name is wrong

    known = sorted({fanout_parent(n) or n for n in names})
    raise UsageError(f"run {run_id} has no step {name!r}{did_you_mean(name, known)}; its steps: {_summary(names)}")


def recorded_gangs(record: RunRecord) -> dict[str, GangShape]:
    """The gang steps of the workflow recorded with the run, by step name; none where the
    record cannot be read (logs then show rank 0).  Only each step's ``gang`` is read back:
    the whole dump does not validate again (a default such as ``gpu_vendor: nvidia`` is
    written out, and a step that asks for no GPU refuses it)."""
    steps = {name: step["gang"] for name, step in recorded_steps(record.spec_json).items() if step.get("gang")}
    if not steps:
        return {}  # no gang: the spec's models (pydantic) are not loaded
    from pydantic import ValidationError

    from hetflow.spec import Gang

    try:
        gangs = {name: Gang.model_validate(gang) for name, gang in steps.items()}
    except ValidationError:
        return {}
    return {name: GangShape(g.replicas, g.launcher) for name, g in gangs.items() if g.replicas > 1}


def attempt_sources(
    paths: RunPaths,
    a: AttemptRecord,
    gangs: dict[str, GangShape],
    *,
    rank: int | None,
    label: str,
) -> list[LogSource]:
    """The logs of attempt ``a`` to print: replica ``rank``'s, else every replica's of a gang
    (an mpi gang's rank 0), else the attempt's own; ``label`` starts every line."""
    gang = gangs.get(a.step) or gangs.get(fanout_parent(a.step) or "")
    if rank is not None:
        return [LogSource(paths.rank_log(a.step, a.attempt, rank), label)]
    if gang is None or gang.launcher == "mpi":
        return [LogSource(paths.rank_log(a.step, a.attempt, 0), label)]
    return [LogSource(paths.rank_log(a.step, a.attempt, r), f"{label}[rank{r}]: ") for r in range(gang.replicas)]


CACHED_FROM = "cached: from run "  # how a step taken from the cache gives its reason (``dispatching.cachepass``)


@dataclass(frozen=True)
class CachedOrigin:
    """Where a step taken from the cross-run cache got its result: the run whose attempt made
    it (followed through runs that took it from the cache in turn), and that attempt; or why
    its log cannot be shown (``missing``)."""

    run: RunRecord | None
    attempt: AttemptRecord | None
    run_id: str
    missing: str = ""


def cached_origin(store: Store, run_id: str, step: str) -> CachedOrigin | None:
    """The origin of ``step`` of ``run_id`` when it was taken from the cache, else None."""
    reason, seen = store.step(run_id, step).reason, {run_id}
    while reason.startswith(CACHED_FROM):
        src = reason[len(CACHED_FROM) :].split()[0]
        try:
            record, reason = store.run(src), store.step(src, step).reason
        except StateError:
            return CachedOrigin(None, None, src, f"run {src} (or its step {step!r}) is no longer in the store")
        if src in seen:
            break
        seen.add(src)
        if not reason.startswith(CACHED_FROM):
            done = [a for a in store.attempts(src, step) if a.state == SUCCEEDED]
            if not done:
                return CachedOrigin(record, None, src, f"run {src} has no succeeded attempt of {step!r}")
            return CachedOrigin(record, done[-1], src)
    return None


def attempt_label(a: AttemptRecord, *, group: bool, whole: bool, item: object = None) -> str:
    """``count[3 sample=a] | `` for a group's item (``count[3 sample=a] #2 | `` for its second
    attempt), ``STEP #ATTEMPT | `` where attempts of one or many steps mix, else nothing; the
    item's index and values (``item``, its recorded values) and the attempt apart, as
    ``spec.step_label`` names them: ``merge.1`` once read as item 1 of merge."""
    name = step_label(a.step, item)
    if group:
        return f"{name}{'' if a.attempt == 1 else f' #{a.attempt}'} | "
    return f"{name} #{a.attempt} | " if whole else ""


def _item_index(name: str) -> int:
    return int(name.rpartition(".")[2])


def _summary(names: Sequence[str]) -> str:
    """Step names with a fan-out's items as one ``count.0..9``."""
    out: list[str] = []
    groups: dict[str, list[int]] = {}
    for n in names:
        parent = fanout_parent(n)
        if parent is None:
            out.append(n)
        elif parent not in groups:
            groups[parent] = [_item_index(n)]
            out.append(parent)
        else:
            groups[parent].append(_item_index(n))
    return ", ".join(f"{n} ({n}.{min(groups[n])}..{max(groups[n])})" if n in groups else n for n in out)
