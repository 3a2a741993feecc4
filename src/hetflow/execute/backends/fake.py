"""A backend in memory, for unit tests: no containers, no engine, no cluster.

Each job's command must be ``sh -c SCRIPT``, and the script is interpreted, not run: the
few shell commands the contract suite and unit tests use (``fakeshell``: ``echo``/``touch``
into mounted directories, ``test -f``, ``sleep``, ``exit N``, ``$NAME`` from the job's
environment, and one loop, ``until COMMAND; do COMMAND; done``: a test's gate, ``until test -f
/out/go; do sleep 0.1; done``, waits for a file the test writes).  Files are written into the
real host directories the job mounts, so tests check outputs as they would for a real backend.

Jobs advance on a clock: a job ends when its sleeps have passed (``FakeState.clock``; a
test may pass a faster or a manual one).  With ``holds_dependencies`` the fake orders jobs
as Slurm does: a job starts when its parents have succeeded, and is dropped
(``dependency_failed``) when one did not; a job given ``Job.publish`` moves its outputs into
place the moment it ends 0, before any dependant can start, as the Slurm job script does
(or ends ``PUBLISH_FAILED_CODE`` when a declared output is missing), and only while the step's
fencing token names its attempt (``execute.data.fencing``; else it ends ``DISCARDED_CODE``, its
outputs left in its own folder).  Adoption: every FakeBackend built on one ``FakeState`` sees
the same jobs, as two hetflow processes see one engine.  ``cluster``: it says it assigns GPUs
and queues (a runner then follows a cluster plan, ``ClusterDispatch``), as Slurm and Ray do.

A gang job (``Job.ranks``) runs every replica's script and is reported as the job's one name
by ``execute.gang.replicas.gang_state``; one replica failing stops the others (exit 143), as podman's
backend does.  ``FakeState.fail_node`` ends every job that runs with ``node_failed``, as
Slurm's NODE_FAIL or a lost Ray node does; ``FakeState.lose_node`` reports them so too while
they run on (a node that lost only its slurmd: a cancel reaches them once ``reconnect`` says the
node is back), and one that ends 0 then tries to put its outputs in place, late, as its Slurm
job script would.  ``watch`` (with ``watches``) wakes the runner
from a thread that advances the run's jobs when one of them ends.
"""

from __future__ import annotations

import shlex
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.base import DISCARDED_CODE, PUBLISH_FAILED_CODE, Job, JobState
from hetflow.execute.backends.capabilities import Capabilities
from hetflow.execute.backends.fakeshell import FakeJob, log, parse, step
from hetflow.execute.backends.plugin import BackendPlugin, RunSettings
from hetflow.execute.data import fencing
from hetflow.execute.data.outputs import missing_message, missing_outputs, move_into_place
from hetflow.execute.engine import ContainerEngine
from hetflow.execute.gang.replicas import gang_state

CANCELLED_CODE = 143  # 128 + SIGTERM, as `podman stop` and scancel report a stopped job
WATCH_TICK = 0.02  # seconds between a watcher's looks at the clock
NODE = "fake"  # the one node every job runs on
# The fake as a plugin (``backends.plugin``), for the tests that add a backend to the registry
# (``registry.MODULES``) and find every stage takes it: it runs steps as local does.
PLUGIN = BackendPlugin(
    name="fake",
    help="an engine in memory, for tests",
    capabilities=Capabilities(name="fake"),
    backend="hetflow.execute.backends.fake:FakeBackend",
)


@dataclass
class FakeState:
    """The fake engine's memory, shared by every FakeBackend built on it (adoption)."""

    clock: Callable[[], float] = time.monotonic
    images: frozenset[str] | None = None  # None: every image exists
    jobs: dict[str, FakeJob] = field(default_factory=dict)
    # exit codes of released jobs, so that a child submitted later still sees its parents'
    released: dict[str, int | None] = field(default_factory=dict)
    # released while they run on, out of the engine's reach (``lose_node``): not reported, still run
    orphans: list[FakeJob] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_node(self) -> list[str]:
        """The node goes down: every job that has started and not ended ends ``node_failed``
        with no exit code of its own; the names of those jobs."""
        with self.lock:
            hit = [a for a in self.jobs.values() if a.at is not None and not a.ended]
            for a in hit:
                for r in [a, *a.replicas]:
                    r.node_failed, r.status, r.reason = True, "NODE_FAIL", f"node {NODE} failed"
            return [a.job.name for a in hit]

    def lose_node(self) -> list[str]:
        """The node loses touch with the engine only (its slurmd killed, its network cut): every
        job that runs is reported ``node_failed``, as ``fail_node`` does, but runs on, and a
        cancel waits for ``reconnect``; the names of those jobs."""
        with self.lock:
            hit = [a for a in self.jobs.values() if a.at is not None and not a.ended]
            for a in hit:
                a.unreachable = True
            return [a.job.name for a in hit]

    def reconnect(self) -> None:
        """The lost node answers again: the cancels sent meanwhile reach its jobs."""
        with self.lock:
            for a in [*self.jobs.values(), *self.orphans]:
                if a.unreachable and a.cancelled_later:
                    for r in [a, *a.replicas]:
                        if not r.ended:
                            r.code, r.status, r.reason = CANCELLED_CODE, "exited", "cancelled"
                a.unreachable = False


class FakeBackend:
    def __init__(
        self,
        state: FakeState | None = None,
        *,
        holds_dependencies: bool = False,
        multi_node: bool = False,
        watches: bool = False,
        cluster: bool = False,
    ) -> None:
        self.state = state or FakeState()
        self.watches = watches  # False: watch says it cannot, and the runner polls (a manual clock)
        self.capabilities = Capabilities(
            name="fake",
            holds_dependencies=holds_dependencies,
            multi_node=multi_node,
            assigns_gpus=cluster,
            queues=cluster,
            places_steps=cluster,
        )

    @classmethod
    def from_settings(cls, settings: RunSettings, engine: ContainerEngine | None) -> FakeBackend:
        return cls()

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        return None

    def check(self) -> None:
        pass

    def image_exists(self, image: str) -> bool:
        return self.state.images is None or image in self.state.images

    def image_id(self, image: str) -> str | None:
        return f"fake:{image}" if self.image_exists(image) else None

    def submit(self, job: Job) -> None:
        command = job.container.command
        if len(command) != 3 or command[:2] != ("sh", "-c"):
            raise EngineError(f"the fake backend runs only `sh -c SCRIPT`, not {shlex.join(command)}")
        with self.state.lock:
            old = self.state.jobs.get(job.name)
            if old is not None and not self._advance(old):
                raise EngineError(f"a job named {job.name} is already running")
            parents = job.depends_on if self.capabilities.holds_dependencies else ()
            unknown = [p for p in parents if p not in self.state.jobs and p not in self.state.released]
            if unknown:
                raise EngineError(f"{job.name} depends on {', '.join(unknown)}, which the fake backend does not know")
            self.state.released.pop(job.name, None)
            start = None if parents else self.state.clock()
            attempt = FakeJob(job, parse(command[2]), start)
            for spec in job.ranks[1:]:
                if len(spec.command) != 3 or spec.command[:2] != ("sh", "-c"):
                    raise EngineError(f"the fake backend runs only `sh -c SCRIPT`, not {shlex.join(spec.command)}")
                attempt.replicas.append(
                    FakeJob(replace(job, name=spec.name, container=spec), parse(spec.command[2]), start)
                )
            self.state.jobs[job.name] = attempt
            self._advance(attempt)

    def poll(self, run_id: str) -> dict[str, JobState]:
        with self.state.lock:
            mine = [a for a in self.state.jobs.values() if a.job.run_id == run_id]
            for a in [*mine, *(o for o in self.state.orphans if o.job.run_id == run_id)]:
                self._advance(a)
            return {a.job.name: _job_state(a) for a in mine}

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        with self.state.lock:
            found = [a for a in (self.state.jobs.get(n) for n in names) if a is not None]
            # all at once: a child cancelled with its parent is cancelled, not dropped for the parent
            for a in [a for a in found if not self._advance(a)]:
                a.cancelled_later = a.unreachable  # out of the engine's reach until ``reconnect``
                for r in [a, *a.replicas] if not a.unreachable else []:
                    if not r.ended:
                        r.code, r.status, r.reason = CANCELLED_CODE, "exited", "cancelled"

    def release(self, names: Iterable[str]) -> None:
        with self.state.lock:
            for name in names:
                a = self.state.jobs.pop(name, None)
                if a is not None:
                    self.state.released[name] = a.code
                    if a.unreachable and not a.ended:
                        self.state.orphans.append(a)  # forgotten by hetflow, it runs on

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """A thread that advances the run's jobs on the clock and calls ``wake`` when one
        ends (podman's watcher follows its events); the stopper ends it.  None unless made
        with ``watches``: a test that moves a manual clock wants no thread beside it."""
        if not self.watches:
            return None
        stop = threading.Event()

        def loop() -> None:
            seen: set[str] = set()
            while not stop.wait(WATCH_TICK):
                with self.state.lock:
                    ended = {
                        a.job.name for a in self.state.jobs.values() if a.job.run_id == run_id and self._advance(a)
                    }
                if ended - seen:
                    wake()
                seen = ended

        threading.Thread(target=loop, name=f"fake-watch-{run_id}", daemon=True).start()
        return stop.set

    # --- the engine -------------------------------------------------------------------

    def _parent_codes(self, a: FakeJob) -> dict[str, int | None]:
        """Each parent's exit code; a missing key: still running."""
        out: dict[str, int | None] = {}
        for p in a.job.depends_on:
            parent = self.state.jobs.get(p)
            if parent is None:
                out[p] = self.state.released.get(p)
            elif parent.unreachable:  # NODE_FAIL to the engine: never satisfies afterok
                out[p] = None
            elif parent.ended:
                out[p] = None if parent.dependency_failed else parent.code
        return out

    def _advance(self, a: FakeJob) -> bool:
        """Run the job's commands (every replica's, for a gang) up to the clock's now, then
        publish its outputs if it ended 0 (``_publish``); True when it has ended."""
        ended = self._advance_all(a)
        if ended and not a.published and a.job.publish is not None:
            a.published = True
            if all(r.code == 0 for r in [a, *a.replicas]):
                _publish(a)
        return ended

    def _advance_all(self, a: FakeJob) -> bool:
        """Every replica's commands up to now; True when the job has ended.  A gang's replica
        that fails stops the others."""
        if not a.replicas:
            return self._advance_one(a)
        for r in a.replicas:
            r.at = a.at if r.at is None else r.at
        ended = [self._advance_one(r) for r in [a, *a.replicas]]
        if not all(ended) and any(r.code not in (0, None) for r in [a, *a.replicas]):
            for r in [a, *a.replicas]:
                if not r.ended:
                    r.code, r.status, r.reason = CANCELLED_CODE, "exited", "stopped: another replica failed"
            return True
        return all(ended)

    def _advance_one(self, a: FakeJob) -> bool:
        """Run one container's commands up to the clock's now; True when it has ended."""
        now = self.state.clock()
        if a.at is None and not a.ended:
            codes = self._parent_codes(a)
            failed = [p for p, c in codes.items() if c != 0]
            if failed:
                a.dependency_failed, a.status = True, "cancelled"
                a.reason = f"{', '.join(failed)} did not succeed; the job was dropped without running"
                return True
            if len(codes) < len(a.job.depends_on):
                waiting = [p for p in a.job.depends_on if p not in codes]
                a.status, a.reason = "pending", f"waiting for {', '.join(waiting)}"
                return False
            a.at, a.reason = now, ""
        while not a.ended and a.at is not None and a.at <= now:
            a.status = "running"
            a.began = a.began or time.time()
            if a.pc == len(a.program):
                a.code, a.status = a.last, "exited"
                break
            step(a)
        if a.ended and a.began is not None and a.finished is None:
            a.finished = time.time()
        return a.ended


def _publish(a: FakeJob) -> None:
    """What the Slurm job script does after its container ends 0 (``base.Publish``), under the
    engine's lock, so no dependant starts before it: every declared output under staging, then
    staging renamed to final while the step's fencing token names the job's attempt (under the
    step's lock); else the job ends ``PUBLISH_FAILED_CODE`` (or ``DISCARDED_CODE``) and staging stays."""
    assert a.job.publish is not None
    staging, final = Path(a.job.publish.staging), Path(a.job.publish.final)
    missing = missing_outputs(staging, a.job.publish.declared)
    if missing:
        log(a, "stderr", f"hetflow: {missing_message(missing)}")
        a.code, a.reason = PUBLISH_FAILED_CODE, missing_message(missing)
        return
    try:
        with fencing.locked(final):
            fencing.check(final, staging, a.job.attempt)
            move_into_place(staging, final)
    except fencing.Fenced as exc:
        log(a, "stderr", f"hetflow: {exc}")
        a.code, a.reason = DISCARDED_CODE, str(exc)
    except OSError as exc:
        log(a, "stderr", f"hetflow: could not move /out into place ({final}): {exc.strerror or exc}")
        a.code, a.reason = PUBLISH_FAILED_CODE, f"could not move /out into place: {exc.strerror or exc}"


def _job_state(a: FakeJob) -> JobState:
    node = None if a.at is None else NODE
    if a.unreachable:  # what the engine says of a job whose node it lost, however it goes on
        return JobState(a.job.name, False, None, "NODE_FAIL", NODE, reason=f"node {NODE} failed", node_failed=True)
    if a.replicas and not a.node_failed:
        ranks = [a, *a.replicas]
        g = gang_state({i: (not r.ended, r.code, r.status) for i, r in enumerate(ranks)}, len(ranks))
        reason = f"replica {g.failed_rank} failed ({g.status})" if g.failed_rank is not None else ""
        return JobState(a.job.name, g.running, g.exit_code, g.status, node=node, reason=reason)
    reason = a.reason if (a.ended and (a.code or a.dependency_failed or a.node_failed)) or a.status == "pending" else ""
    return JobState(
        a.job.name,
        not a.ended,
        a.code,
        a.status,
        node=node,
        reason=reason,
        dependency_failed=a.dependency_failed,
        node_failed=a.node_failed,
        started=a.began,
        ended=a.finished,
    )
