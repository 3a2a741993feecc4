"""`hetflow doctor`: what crashed runs left behind, and its repair.

A ``kill -9`` of an executor can leave five kinds of leftovers: containers of its run (a
finished one waiting for its batch removal, or one whose run has since ended), the private
networks of its gangs, GPU leases held in the name of the dead process, a publish cut short
(files staged or kept beside the user's targets, a set half replaced: its journal says which),
and the run's own row still saying "running".  ``diagnose`` lists them from the store and the engine, without
changing anything; ``repair`` removes or releases what ``diagnose`` found.  Two more that no
run's row shows (issue 37): the monitors (conmon, and the ``runc init`` or container under it)
of a run's containers that podman no longer lists, alive for ever after their ``podman run``
was killed mid-create (``orphans``; found by the container's name and its log under the run's
folder), and a copy into the cache's objects a killed process left half written
(``data.cache.partial_copies``).

What is never touched: a run whose executor lives (its in-flight work, and the finished
containers its batches will remove), containers and networks of runs this store does not
know (another HETFLOW_HOME's), and, for a run whose executor is gone, the containers of the
attempts still in flight: running ones are adopted by ``hetflow resume``, finished ones are
collected by it (their exit code and outputs are the step's result).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from hetflow.errors import StateError
from hetflow.execute.backends.local.orphans import Monitor, monitors, reap
from hetflow.execute.data.cache import partial_copies
from hetflow.execute.data.publishing.journal import committed, journals, leftovers, settle_run
from hetflow.execute.engine import ContainerState
from hetflow.execute.gang.replicas import network_name, replica_of
from hetflow.kube import LABEL_RUN
from hetflow.state import (
    LAUNCHING,
    RUN_FAILED,
    RUN_TERMINAL,
    RUNNING,
    Lease,
    Note,
    RunRecord,
    RunStateChanged,
    Store,
    executor_gone,
    pid_alive,
    record,
)

Kind = Literal["run", "container", "network", "lease", "publish", "process", "cache"]
Monitors = Callable[[], Sequence[Monitor]]  # the container monitors alive now (``orphans.monitors``)
INTERRUPTED = "interrupted: its executor (pid {pid}) is gone; 'hetflow resume {run}' continues it"


class Leftovers(Protocol):
    """The engine as the doctor sees it (CliEngine, FakeEngine)."""

    def all_runs(self) -> Mapping[str, ContainerState]: ...

    def run_networks(self) -> dict[str, str]: ...

    def remove(self, names: Iterable[str]) -> None: ...

    def remove_network(self, name: str) -> None: ...


@dataclass(frozen=True)
class Finding:
    """One leftover: what it is, whose, why it is one, and what ``--repair`` does."""

    kind: Kind
    name: str
    run_id: str
    why: str
    action: str


def diagnose(
    store: Store,
    engine: Leftovers,
    *,
    gone: Callable[[RunRecord], bool] = executor_gone,
    alive: Callable[[int], bool] = pid_alive,
    watched: Monitors = monitors,
) -> list[Finding]:
    """Every leftover, runs first (a stale run is repaired before its containers are judged)."""
    runs: dict[str, RunRecord] = {}
    alive_now = watched()  # before the engine lists its containers: one made meanwhile is listed

    def run_of(run_id: str) -> RunRecord | None:
        if run_id not in runs:
            try:
                runs[run_id] = store.run(run_id)
            except StateError:
                return None
        return runs[run_id]

    found: list[Finding] = []
    for r in store.runs(include_ended=False, limit=100_000):
        if gone(r):
            runs[r.id] = r
            found.append(
                Finding("run", r.id, r.id, f"says {r.state}, but its executor (pid {r.pid}) is gone", "mark failed")
            )
    stale = {f.run_id for f in found}

    def dead(run_id: str) -> bool:
        r = run_of(run_id)
        return r is not None and (r.id in stale or r.state in RUN_TERMINAL)

    containers = engine.all_runs()
    kept: set[str] = set()  # jobs whose result resume adopts or collects
    for run_id in {str(c.labels.get(LABEL_RUN, "")) for c in containers.values()}:
        if dead(run_id):
            kept |= {a.container for a in store.attempts(run_id) if a.state in (LAUNCHING, RUNNING)}
    for name, c in sorted(containers.items()):
        run_id = str(c.labels.get(LABEL_RUN, ""))
        if not dead(run_id):
            continue  # a live run's own, or another store's
        job = (replica_of(name) or (name, 0))[0]
        if job in kept:
            continue
        what = "running" if c.running else f"exited ({c.exit_code})"
        why = f"{what}; its attempt is over and no executor holds run {run_id}"
        found.append(Finding("container", name, run_id, why, "remove"))
    for net, run_id in sorted(engine.run_networks().items()):
        if dead(run_id) and not any(network_name(job) == net for job in kept):
            found.append(Finding("network", net, run_id, "gang network of a run no executor holds", "remove"))
    found += _publishes(store, lambda run_id: run_of(run_id) is None or dead(run_id))
    found += _monitors(alive_now, containers, run_of, dead)
    found += _partial_copies(store, alive)
    running = {n for n, c in containers.items() if c.running}
    for lease in store.leases():
        if not alive(lease.pid) and lease.container not in running:
            found.append(
                Finding(
                    "lease",
                    lease.gpu_uuid,
                    lease.run_id,
                    _lease_why(lease),
                    "release",
                )
            )
    return found


def repair(
    store: Store,
    engine: Leftovers,
    findings: list[Finding],
    *,
    clock: Callable[[], float] = time.time,
    watched: Monitors = monitors,
) -> None:
    """Do what each finding's ``action`` says; a stale run is marked failed (resumable)
    with an event, so that `logs -f` and `tail` readers see it end."""
    for f in findings:
        if f.kind == "run":
            r = store.run(f.run_id)
            now = clock()
            message = INTERRUPTED.format(pid=r.pid, run=r.id)
            store.set_run(r.id, state=RUN_FAILED, ended=now, pid=None, message=message)
            record(store, RunStateChanged(0, r.id, now, f"hetflow doctor: {message}", RUN_FAILED))
    engine.remove([f.name for f in findings if f.kind == "container"])
    for f in findings:
        if f.kind == "network":
            engine.remove_network(f.name)
    # a GPU may have several holders (time-slicing / MPS tenants, MIG instances): the
    # finding's why names the dead one's container
    dead = {(f.name, f.run_id, f.why) for f in findings if f.kind == "lease"}
    for container in sorted({x.container for x in store.leases() if (x.gpu_uuid, x.run_id, _lease_why(x)) in dead}):
        store.release_gpus(container)
    for run_id in sorted({f.run_id for f in findings if f.kind == "publish"}):
        settle_run(store, run_id)  # each settled publish is said in the run's events
    orphaned = {f.name for f in findings if f.kind == "process"}
    for m in watched():  # looked for again by name: a PID taken since by another process is left alone
        if m.name in orphaned:
            reap(m)
    for f in findings:
        if f.kind == "cache":
            Path(f.name).unlink(missing_ok=True)
    for run_id in sorted({f.run_id for f in findings if f.kind in ("container", "network", "process")}):
        n = sum(f.run_id == run_id and f.kind in ("container", "network", "process") for f in findings)
        record(store, Note(0, run_id, clock(), f"hetflow doctor removed {n} leftover(s)", None, "collected"))


def _publishes(store: Store, dead: Callable[[str], bool]) -> list[Finding]:
    """Publishes a killed executor cut short (``execute.data.publishing.journal``): what they left
    in the user's folders, undone (or finished, when their records were written) by --repair."""
    found = []
    for j in journals(store):
        if dead(j.by.run_id):
            left = leftovers(j)
            what = f"{len(left)} staged or kept file(s) beside its targets" if left else "its targets to check"
            why = f"a publish of step {j.by.step!r} was cut short, no executor holds run {j.by.run_id}: {what}"
            action = "remove its leftovers" if committed(j, store) else "put every target back as it was"
            found.append(Finding("publish", ", ".join(j.folders()), j.by.run_id, why, action))
    return found


def tidy(store: Store, engine: Leftovers, run_id: str, *, watched: Monitors = monitors) -> list[Finding]:
    """What ``hetflow resume`` of a run that has ended does: remove what it left behind (its
    containers, gang networks and orphaned monitors), as ``repair`` would; a kill just after the
    run was recorded succeeded left its exited containers for ever (issue 37).  The findings."""
    found = [f for f in diagnose(store, engine, watched=watched) if f.run_id == run_id]
    found = [f for f in found if f.kind in ("container", "network", "process")]
    repair(store, engine, found, watched=watched)
    return found


def _monitors(
    alive_now: Sequence[Monitor],
    containers: Mapping[str, ContainerState],
    run_of: Callable[[str], RunRecord | None],
    dead: Callable[[str], bool],
) -> list[Finding]:
    """Monitors of containers podman no longer lists, of runs this store knows and no executor
    holds: the container's name is the run's (``hf-RUN-...``) and its log is in the run's folder."""
    found = []
    for m in sorted(alive_now, key=lambda m: m.name):
        run_id = m.name.split("-", 2)[1] if m.name.startswith("hf-") and m.name.count("-") >= 2 else ""
        r = run_of(run_id) if run_id else None
        if r is None or m.name in containers or not dead(run_id) or not _under(m.log, r.workdir):
            continue
        what = f"conmon (pid {m.pid}) and {len(m.below)} process(es) under it"
        why = f"{what}, of a container podman no longer lists; no executor holds run {run_id}"
        found.append(Finding("process", m.name, run_id, why, "kill"))
    return found


def _under(path: str, folder: str) -> bool:
    return bool(path) and Path(path).is_relative_to(folder)


def _partial_copies(store: Store, alive: Callable[[int], bool]) -> list[Finding]:
    """Copies into the cache (``HETFLOW_HOME/cache``) whose process died before they were whole."""
    found = []
    for path, pid in partial_copies(store.path.parent / "cache"):
        if not alive(pid):
            why = f"a copy into the cache that process {pid} began and never finished (it is gone)"
            found.append(Finding("cache", str(path), "", why, "remove"))
    return found


def _lease_why(lease: Lease) -> str:
    return f"held by dead process {lease.pid} for {lease.container}, which is not running"
