"""Which container logs ``hetflow logs`` prints, and the prefix of each one's lines.

A name is a step, or a fan-out group (``count`` for its items ``count.0``, ``count.1``, ...:
every item, each line prefixed with the item's name, as ``kubectl logs -l ... --prefix``
names the pod).  A gang step's replicas each have a log (``RunPaths.rank_log``); unless
``--rank`` picks one, every replica's lines are shown, prefixed ``[rank1]:`` as torchrun
prefixes a worker's lines (torch.distributed.elastic ``--log-line-prefix-template``
default).  An ``mpi`` gang shows rank 0 only by default: ``mpirun`` in replica 0 gathers
every rank's output there, and the other replicas run only sshd.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hetflow.errors import UsageError
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.run.control.recorded import recorded_steps
from hetflow.spec import fanout_parent
from hetflow.state import AttemptRecord, RunRecord


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


def attempt_label(a: AttemptRecord, *, group: bool, whole: bool) -> str:
    """``count.3 | `` for a group's item (``count.3#2 | `` for its second attempt),
    ``STEP.ATTEMPT | `` where attempts of one or many steps mix, else nothing."""
    if group:
        return f"{a.step}{'' if a.attempt == 1 else f'#{a.attempt}'} | "
    return f"{a.step}.{a.attempt} | " if whole else ""


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
