"""The local runner: dispatch ready steps, poll containers, retry, persist.

One loop, one process per run.  Every decision is written to the state store before it
is acted on (the attempt row with its deterministic container name comes before
``podman run``), so a run killed at any instant can be resumed: ``reconcile`` adopts
containers still running, collects exit codes of those that finished meanwhile, and
re-launches intents that never reached the engine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Protocol, cast

from hetflow.errors import HetflowError, StateError
from hetflow.execute.backends.base import Backend, Job
from hetflow.execute.backends.local import LocalBackend
from hetflow.execute.container import build_spec
from hetflow.execute.engine import ContainerEngine
from hetflow.execute.gpu import GpuAccess, gpu_access
from hetflow.execute.logs import log_tail
from hetflow.execute.outputs import accept_outputs, missing_outputs
from hetflow.execute.paths import RunPaths, container_name
from hetflow.inventory.models import Gpu, Node
from hetflow.plan.choose import GreedyChooser, VariantChooser
from hetflow.plan.filters import Capacity
from hetflow.plan.instance import MachineClass, Placement
from hetflow.spec.checks import edges_of
from hetflow.spec.dag import topo_order
from hetflow.spec.models import Workflow
from hetflow.state.models import (
    FAILED,
    LAUNCHING,
    PENDING,
    RUN_FAILED,
    RUN_STOPPED,
    RUN_SUCCEEDED,
    RUNNING,
    SKIPPED,
    STEP_TERMINAL,
    STOPPED,
    SUCCEEDED,
    WAITING,
    AttemptRecord,
    Lease,
    RunRecord,
    StepRecord,
)
from hetflow.state.store import Store


def pid_alive(pid: int, proc: Path = Path("/proc")) -> bool:
    """Whether ``pid`` runs.  A zombie does not: a killed executor whose parent is gone
    stays a zombie where nothing reaps it (PID 1 of a container), yet answers kill(0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = (proc / str(pid) / "stat").read_text()
    except OSError:
        return True  # no /proc to ask: trust kill(0)
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


class Reporter(Protocol):
    def update(self, run: RunRecord, steps: list[StepRecord]) -> None: ...

    def close(self) -> None: ...


class NullReporter:
    def update(self, run: RunRecord, steps: list[StepRecord]) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class RunnerConfig:
    poll_interval: float = 0.25
    retry_backoff: float = 2.0  # seconds before the first retry; doubles each time
    max_backoff: float = 300.0

    @classmethod
    def from_env(cls) -> RunnerConfig:
        return cls(
            poll_interval=float(os.environ.get("HETFLOW_POLL_INTERVAL", "0.25")),
            retry_backoff=float(os.environ.get("HETFLOW_RETRY_BACKOFF", "2")),
        )


@dataclass
class _Active:
    step: str
    attempt: int
    container: str
    cpus: float
    memory: int
    gpus: tuple[str, ...]


class Runner:
    def __init__(
        self,
        *,
        store: Store,
        engine: ContainerEngine | None = None,
        node: Node,
        workflow: Workflow,
        run: RunRecord,
        chooser: VariantChooser | None = None,
        reporter: Reporter | None = None,
        config: RunnerConfig | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] | None = None,
        pid: int | None = None,
        alive: Callable[[int], bool] = pid_alive,
        priority: Mapping[str, float] | None = None,
        backend: Backend | None = None,
        placements: Mapping[str, Placement] | None = None,
        classes: Sequence[MachineClass] = (),
    ) -> None:
        self.store, self.node, self.wf = store, node, workflow
        self.backend: Backend = backend or LocalBackend(engine)
        # Engines that assign GPUs and queue work (Slurm, Ray) follow the cluster plan's
        # placements; this machine's capacity and GPU leases are hetflow's own concern.
        self.cluster = self.backend.capabilities.assigns_gpus
        self.placements = dict(placements or {})
        # node class -> GPU model (the engine's GPU type), and -> the one node a class of one
        # names (the engine's node list: a cluster file lists Slurm nodes or Ray nodes by name)
        self.gpu_models = {c.name: c.gpu_model for c in classes if c.gpus}
        self.pinned_nodes = {c.name: c.name for c in classes if c.count == 1}
        self.run_id = run.id
        self.uid, self.gid = run.uid, run.gid
        self.paths = RunPaths(Path(run.workdir))
        self.chooser = chooser or GreedyChooser()
        self.reporter = reporter or NullReporter()
        self.config = config or RunnerConfig()
        self.clock, self.alive = clock, alive
        self._wake = threading.Event()
        self.sleep = sleep or self._wait
        self._to_remove: list[str] = []
        self.pid = pid if pid is not None else os.getpid()
        # Ready steps are dispatched in this order: the plan's start times when a plan is
        # followed (its ranks, not its clock: a step starts as soon as it can), else file order.
        topo = topo_order(edges_of(workflow))
        self.order = sorted(topo, key=lambda n: (priority or {}).get(n, float("inf"))) if priority else topo
        self.active: dict[str, _Active] = {}
        self._signalled = False
        # Retry budget counts attempts made by this executor session, so a resumed run
        # gets its retries again (as `snakemake --rerun-incomplete` would).
        self.budget_start = {
            # an attempt in flight when the last executor died belongs to this session's budget
            s.step: s.attempts - (1 if s.state in (LAUNCHING, RUNNING) else 0)
            for s in store.steps(run.id)
        }

    # --- the loop ---------------------------------------------------------------------

    def execute(self) -> str:
        """Run to the end; returns the run's final state."""
        self.store.claim_run(self.run_id, self.pid, self.alive)
        self.store.adopt_leases(self.run_id, self.pid)
        self.store.add_event(self.run_id, None, "executor", f"executor {self.pid} on {self.node.name}")
        stop_watch = self.backend.watch(self.run_id, self._wake.set)
        interval = self.config.poll_interval if stop_watch is None else max(0.5, self.config.poll_interval)
        self._reconcile()
        try:
            while True:
                if self._stop_requested():
                    return RUN_STOPPED
                self._poll()
                self._schedule()
                self._flush_removals()
                steps = self.store.steps(self.run_id)
                self.reporter.update(self.store.run(self.run_id), steps)
                if all(s.state in STEP_TERMINAL for s in steps) and not self.active:
                    return self._finish(steps)
                self.sleep(self._next_wait(steps, interval))
        finally:
            if stop_watch is not None:
                stop_watch()
            self._flush_removals()
            self.reporter.close()

    def _wait(self, timeout: float) -> None:
        """Sleep until the engine reports an exit, or ``timeout``."""
        if self._wake.wait(timeout):
            self._wake.clear()

    def _next_wait(self, steps: list[StepRecord], interval: float) -> float:
        """The poll interval, shortened to the next retry's backoff deadline."""
        now = self.clock()
        due = [s.not_before - now for s in steps if s.state == WAITING and s.not_before]
        return max(0.0, min([interval, *due]))

    def _flush_removals(self) -> None:
        """Remove finished containers in one engine call (their results are stored)."""
        if self._to_remove:
            names, self._to_remove = self._to_remove, []
            self.backend.release(names)

    def install_signal_handlers(self) -> None:
        """SIGTERM (from `hetflow stop`) ends the loop without touching the run: the
        stopper owns the containers from then on."""

        def on_term(signum: int, frame: FrameType | None) -> None:
            self._signalled = True

        signal.signal(signal.SIGTERM, on_term)

    def _stop_requested(self) -> bool:
        return self._signalled or self.store.run(self.run_id).state == RUN_STOPPED

    def _finish(self, steps: list[StepRecord]) -> str:
        failed = [s.step for s in steps if s.state in (FAILED, STOPPED)]
        skipped_req = [s.step for s in steps if s.state == SKIPPED and not self.wf.steps[s.step].optional]
        if failed or skipped_req:
            state = RUN_FAILED
            msg = "failed: " + ", ".join(failed + skipped_req)
        else:
            state, msg = RUN_SUCCEEDED, "all steps succeeded"
        self.store.set_run(self.run_id, state=state, ended=self.clock(), message=msg, pid=None)
        self.store.add_event(self.run_id, None, state, msg)
        return state

    # --- resume: adopt, collect, relaunch -----------------------------------------------

    def _reconcile(self) -> None:
        states = self.backend.poll(self.run_id)
        for s in self.store.steps(self.run_id):
            if s.state not in (LAUNCHING, RUNNING):
                continue
            attempts = self.store.attempts(self.run_id, s.step)
            if not attempts:
                self.store.set_step(self.run_id, s.step, state=WAITING, not_before=None)
                continue
            a = attempts[-1]
            st = states.get(a.container)
            variant = self.wf.steps[s.step].resolved_variants()[a.variant]
            act = _Active(
                s.step,
                a.attempt,
                a.container,
                variant.resources.cpus,
                variant.resources.memory,
                a.gpu_uuids,
            )
            if st is not None and st.running:
                self.active[s.step] = act
                self.store.set_step(
                    self.run_id,
                    s.step,
                    state=RUNNING,
                    event=f"adopted running container {a.container}",
                )
                self.store.set_attempt(self.run_id, s.step, a.attempt, state=RUNNING)
            elif st is not None:
                self.store.add_event(
                    self.run_id,
                    s.step,
                    "collected",
                    f"{a.container} finished while hetflow was down (exit {st.exit_code})",
                )
                self.active[s.step] = act
                self._finalize(act, st.exit_code if st.exit_code is not None else 255)
            elif s.state == LAUNCHING:
                # The intent was written but the container never started: launch the same
                # attempt again under the same name.
                self.store.release_gpus(a.container)
                self.store.set_step(
                    self.run_id,
                    s.step,
                    state=WAITING,
                    attempts=a.attempt - 1,
                    not_before=None,
                    event=f"{a.container} was never started; launching it again",
                )
            else:
                self.active[s.step] = act
                self._fail(act, None, f"container {a.container} disappeared while hetflow was down")

    # --- polling ----------------------------------------------------------------------

    def _poll(self) -> None:
        if not self.active:
            return
        states = self.backend.poll(self.run_id)
        for act in list(self.active.values()):
            st = states.get(act.container)
            if st is None:
                self._fail(act, None, f"container {act.container} disappeared")
            elif st.dependency_failed:
                self._requeue(act, st.reason or "a dependency failed")
            elif not st.running:
                self._finalize(act, st.exit_code if st.exit_code is not None else 255)

    def _finalize(self, act: _Active, exit_code: int) -> None:
        step = self.wf.steps[act.step]
        staging = self.paths.staging(act.step, act.attempt)
        final = self.paths.step_out(act.step)
        if exit_code == 0:
            if not staging.exists() and final.exists():
                staging = final  # crashed after the rename, before the commit
            missing = missing_outputs(staging, step.outputs)
            if missing:
                self._fail(
                    act,
                    0,
                    "exited 0 but did not write declared output(s) " + ", ".join(missing) + " under /out",
                )
                return
            records = accept_outputs(self.run_id, act.step, staging, final, step.outputs)
            self.store.succeed_step(self.run_id, act.step, act.attempt, records, self.clock(), 0)
            self._release(act)
            return
        self._fail(act, exit_code, _exit_reason(exit_code))

    def _fail(self, act: _Active, exit_code: int | None, message: str) -> None:
        tail = log_tail(self.paths.log(act.step, act.attempt), 3)
        detail = f"{message}" + (f"; last output: {' | '.join(tail)}" if tail else "")
        now = self.clock()
        self.store.set_attempt(
            self.run_id,
            act.step,
            act.attempt,
            state=FAILED,
            exit_code=exit_code,
            ended=now,
            message=detail,
        )
        self._release(act)
        used = act.attempt - self.budget_start.get(act.step, 0)
        retries = self.wf.steps[act.step].retries
        if used <= retries:
            delay = min(self.config.retry_backoff * 2 ** (used - 1), self.config.max_backoff)
            self.store.set_step(
                self.run_id,
                act.step,
                state=WAITING,
                not_before=now + delay,
                exit_code=exit_code,
                reason=f"attempt {act.attempt}: {detail}",
                event=f"attempt {act.attempt} failed ({detail}); retry {used} of {retries} in {delay:g}s",
            )
        else:
            self.store.set_step(
                self.run_id,
                act.step,
                state=FAILED,
                exit_code=exit_code,
                ended=now,
                reason=detail,
                event=f"attempt {act.attempt} failed ({detail}); no retries left",
            )

    def _release(self, act: _Active) -> None:
        self.active.pop(act.step, None)
        if act.gpus:
            self.store.release_gpus(act.container)
        self._to_remove.append(act.container)

    # --- dispatch ---------------------------------------------------------------------

    def _schedule(self) -> None:
        steps = {s.step: s for s in self.store.steps(self.run_id)}
        now = self.clock()
        for name in self.order:
            s = steps[name]
            if s.state not in (PENDING, WAITING) or name in self.active:
                continue
            deps = self.wf.steps[name].dependencies()
            broken = [d for d in deps if steps[d].state in (FAILED, SKIPPED, STOPPED)]
            if broken:
                self.store.set_step(
                    self.run_id,
                    name,
                    state=SKIPPED,
                    ended=now,
                    reason=f"upstream step {broken[0]!r} {steps[broken[0]].state}",
                    event=f"skipped: upstream step {broken[0]!r} {steps[broken[0]].state}",
                )
                steps[name] = self.store.step(self.run_id, name)
                continue
            if not all(steps[d].state == SUCCEEDED or self._submitted_ahead(d) for d in deps):
                continue
            if s.not_before and s.not_before > now:
                continue
            self._try_launch(name, s)

    def _planned_class(self, step: str) -> str | None:
        placed = self.placements.get(step) if self.cluster else None
        return placed.machine_class if placed else None

    def _submitted_ahead(self, step: str) -> bool:
        """With an engine that holds the DAG's order (Slurm afterok), a child is submitted
        as soon as its parent is: the engine starts it when the parent succeeds."""
        return self.backend.capabilities.holds_dependencies and step in self.active

    def _requeue(self, act: _Active, reason: str) -> None:
        """The engine dropped a job whose parent failed: not this step's failure.  It goes
        back to pending (under a new attempt name, outside the retry budget)."""
        self.budget_start[act.step] = self.budget_start.get(act.step, 0) + 1
        self.store.set_attempt(self.run_id, act.step, act.attempt, state=STOPPED, ended=self.clock(), message=reason)
        self.active.pop(act.step, None)
        self._to_remove.append(act.container)
        self.store.set_step(
            self.run_id,
            act.step,
            state=WAITING,
            not_before=None,
            reason=f"requeued: {reason}",
            event=f"{act.container} dropped by the engine ({reason}); submitted again later",
        )

    def _free(self) -> Capacity:
        cpus = self.node.cpu.cores - sum(a.cpus for a in self.active.values())
        mem = self.node.memory_bytes - sum(a.memory for a in self.active.values())
        held = {lease.gpu_uuid for lease in self.store.leases() if not self._stale(lease)}
        return Capacity(cpus, mem, tuple(g for g in self.node.gpus if g.uuid not in held))

    def _stale(self, lease: Lease) -> bool:
        """A lease is dead when its process is gone and its container is not running."""
        if lease.pid == self.pid or self.alive(lease.pid):
            return False
        st = self.backend.poll(lease.run_id).get(lease.container)
        return st is None or not st.running

    def _try_launch(self, name: str, s: StepRecord) -> None:
        step = self.wf.steps[name]
        if self.cluster:
            placed = self.placements.get(name)
            if placed is None:
                self._no_fit(name, "no node of the cluster can run this step (see 'hetflow plan --explain')")
                return
            self._launch(name, s, placed.variant, (), f"{placed.variant} on {placed.machine_class} (planned)")
            return
        choice = self.chooser.choose(step, self.node, self._free(), name)
        if choice.variant is None:
            if choice.wait:
                reason = "waiting for resources: " + choice.explain()
                if s.reason != reason:
                    self.store.set_step(self.run_id, name, reason=reason)
                return
            self._no_fit(name, "no variant can run on this machine: " + choice.explain())
            return
        self._launch(name, s, choice.variant, choice.gpus, choice.explain())

    def _no_fit(self, name: str, why: str) -> None:
        """Nothing can ever run the step: an optional one is skipped, any other fails."""
        optional = self.wf.steps[name].optional
        self.store.set_step(
            self.run_id,
            name,
            state=SKIPPED if optional else FAILED,
            ended=self.clock(),
            reason=why,
            event=("skipped (optional step): " if optional else "") + why,
        )

    def _launch(self, name: str, s: StepRecord, vname: str, gpus: tuple[Gpu, ...], why: str) -> None:
        step = self.wf.steps[name]
        variant = step.resolved_variants()[vname]
        attempt = s.attempts + 1
        container = container_name(self.run_id, name, attempt)
        uuids = tuple(g.uuid for g in gpus)
        if uuids:
            holder = Lease("", self.run_id, name, attempt, container, self.pid)
            stale = [lease for lease in self.store.leases() if lease.gpu_uuid in uuids and self._stale(lease)]
            if not self.store.acquire_gpus(list(uuids), holder, stale):
                return  # another process took them between our look and our grab
        staging = self.paths.staging(name, attempt)
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        os.chown(staging, self.uid, self.gid)
        self.paths.log(name, attempt).parent.mkdir(parents=True, exist_ok=True)
        # On a cluster the engine assigns the GPUs and its job gives the container exactly
        # those device nodes; here hetflow passes the ones it leased.
        if self.cluster:
            access = GpuAccess() if variant.resources.gpus else gpu_access((), self.node)
        else:
            access = gpu_access(gpus, self.node)
        spec = build_spec(
            run_id=self.run_id,
            step_name=name,
            step=step,
            variant=variant,
            attempt=attempt,
            uid=self.uid,
            gid=self.gid,
            paths=self.paths,
            access=access,
        )
        now = self.clock()
        self.store.add_attempt(
            AttemptRecord(
                self.run_id,
                name,
                attempt,
                vname,
                self._planned_class(name) or self.node.name,
                tuple(g.index for g in gpus),
                uuids,
                container,
                variant.image,
                LAUNCHING,
                None,
                now,
                None,
                "",
            )
        )
        gpu_text = ",".join(str(g.index) for g in gpus) or "none"
        self.store.set_step(
            self.run_id,
            name,
            state=LAUNCHING,
            variant=vname,
            node=placed_class if (placed_class := self._planned_class(name)) else self.node.name,
            gpus=[g.index for g in gpus],
            attempts=attempt,
            started=s.started or now,
            reason=why,
            not_before=None,
            event=f"attempt {attempt}: variant {vname}, GPUs {gpu_text}, container {container} ({why})",
        )
        placed = self.placements.get(name)
        depends = tuple(self.active[d].container for d in step.dependencies() if d in self.active)
        job = Job(
            name=container,
            run_id=self.run_id,
            step=name,
            attempt=attempt,
            container=spec,
            cpus=variant.resources.cpus,
            memory=variant.resources.memory,
            gpus=variant.resources.gpus,
            gpu_model=self.gpu_models.get(placed.machine_class) if placed else None,
            node=(pinned := self.pinned_nodes.get(placed.machine_class) if placed else None),
            # a pinned node says it all; otherwise the engine picks among the class's nodes
            node_class=placed.machine_class if placed and not pinned else None,
            depends_on=depends if self.backend.capabilities.holds_dependencies else (),
        )
        act = _Active(name, attempt, container, variant.resources.cpus, variant.resources.memory, uuids)
        self.active[name] = act
        try:
            self.backend.submit(job)
        except HetflowError as exc:
            self._fail(act, None, str(exc))
            return
        self.store.set_step(self.run_id, name, state=RUNNING)
        self.store.set_attempt(self.run_id, name, attempt, state=RUNNING)


def _exit_reason(code: int) -> str:
    hints = {
        125: "the container engine failed to run the container",
        126: "the command could not be executed (permission?)",
        127: "the command was not found in the image",
        137: "killed (SIGKILL: out of memory, or stopped)",
        143: "terminated (SIGTERM)",
    }
    return f"exited with code {code}" + (f" ({hints[code]})" if code in hints else "")


def stop_run(
    store: Store,
    engine: ContainerEngine | Backend,
    run_id: str,
    *,
    timeout: int = 10,
    alive: Callable[[int], bool] = pid_alive,
) -> list[str]:
    """`hetflow stop`: end the executor, stop the run's containers (cancel its jobs), record
    it all.  Returns the names of the jobs stopped."""
    backend = cast(Backend, engine) if hasattr(engine, "capabilities") else LocalBackend(engine)
    run = store.run(run_id)
    if run.pid and run.pid != os.getpid() and alive(run.pid):
        os.kill(run.pid, signal.SIGTERM)
        deadline = time.time() + 10
        while alive(run.pid) and time.time() < deadline:
            time.sleep(0.05)
    now = time.time()
    store.set_run(run_id, state=RUN_STOPPED, ended=now, pid=None, message="stopped by hetflow stop")
    live = [a for a in store.attempts(run_id) if a.state in (LAUNCHING, RUNNING)]
    names = [a.container for a in live]
    backend.cancel(names)
    states = backend.poll(run_id)
    for a in live:
        st = states.get(a.container)
        store.set_attempt(
            run_id,
            a.step,
            a.attempt,
            state=STOPPED,
            ended=now,
            exit_code=st.exit_code if st else None,
            message="stopped",
        )
        store.release_gpus(a.container)
    for s in store.steps(run_id):
        if s.state in (LAUNCHING, RUNNING, WAITING):
            with contextlib.suppress(StateError):
                store.set_step(
                    run_id,
                    s.step,
                    state=STOPPED,
                    ended=now,
                    reason="stopped by hetflow stop",
                    event="stopped by hetflow stop",
                )
    backend.release(names)
    store.add_event(run_id, None, RUN_STOPPED, f"stopped; {len(names)} container(s) stopped")
    return names


def reset_for_resume(
    store: Store, run_id: str, damaged: Callable[[str], list[str]], edges: dict[str, list[str]]
) -> list[str]:
    """Make a stopped or failed run runnable again.

    Failed, stopped and skipped steps go back to pending; a succeeded step whose
    recorded outputs are gone or changed is re-run, and so is everything downstream
    of it.  Launching/running steps are left for the runner's reconcile.  Returns
    the steps reset."""
    from hetflow.spec.dag import descendants

    reset: set[str] = set()
    steps = store.steps(run_id)
    for s in steps:
        if s.state in (FAILED, STOPPED, SKIPPED):
            reset.add(s.step)
        elif s.state == SUCCEEDED:
            bad = damaged(s.step)
            if bad:
                store.add_event(
                    run_id,
                    s.step,
                    "damaged",
                    f"recorded output(s) {', '.join(bad)} missing or changed; the step runs again",
                )
                reset.add(s.step)
                reset |= descendants(edges, s.step)
    for s in steps:
        if s.step in reset and s.state != PENDING:
            store.set_step(
                run_id,
                s.step,
                state=PENDING,
                exit_code=None,
                ended=None,
                reason="",
                not_before=None,
            )
    return sorted(reset)
