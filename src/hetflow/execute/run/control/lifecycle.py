"""A run's life outside the loop: stop it, make it runnable again, and on resume adopt
what the last executor left (containers or jobs still running, exits that happened while
hetflow was down, launches that never reached the engine)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from hetflow.errors import HetflowError, StateError
from hetflow.execute.backends.base import Backend, Checkpoints, DropsNetworks, JobState, SettlesLaunches
from hetflow.execute.checkpoint import CheckpointImages
from hetflow.execute.data.outputs import missing_outputs
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.gang.elastic import RESIZED
from hetflow.execute.gang.replicas import REPLICA_MISSING, replica_name
from hetflow.execute.run.attempts import NODE_FAULT_REQUEUES, Active, Attempts
from hetflow.execute.run.batching import is_batch, refine
from hetflow.execute.run.control.recorded import recorded_steps
from hetflow.execute.run.control.stopping import (
    StopRequest,
    by_grace,
    cancel_by_grace,
    executor_stops,
    step_graces,
)
from hetflow.spec import fanout_parent, format_bytes
from hetflow.state import (
    LAUNCHING,
    QUEUED_PREFIX,
    RUN_STOPPED,
    RUNNING,
    STOPPED,
    WAITING,
    AttemptFinished,
    AttemptRecord,
    Note,
    RunRecord,
    RunStateChanged,
    Store,
    pid_alive,
    process_start,
    record,
)

__all__ = [
    "pid_alive",
    "reconcile",
    "settle_launches",
    "spawn_executor",
    "stop_run",
]  # pid_alive: from state.liveness


def settle_launches(attempts: Attempts) -> None:
    """Before the executor first lists the run's containers (its watch): wait out the launches
    a killed executor left in flight (``execute.orphans``: its ``podman run``s go on without
    it), so a container still being created is not taken for one that never was and launched
    again under its name; then remove what a gang launch it did not finish started (some
    replicas, not all), so that attempt is launched whole again, not failed for a replica it
    never made.  Removed now, not in the watch's background batches: the name is reused."""
    backend, store, run_id = attempts.backend, attempts.store, attempts.run_id
    if not isinstance(backend, SettlesLaunches):
        return
    names: list[str] = []
    gangs: list[str] = []
    for s in store.steps(run_id, (LAUNCHING, RUNNING)):
        history = store.attempts(run_id, s.step)
        if history:
            c = history[-1].container
            n = attempts.wf.steps[s.step].replicas if s.step in attempts.wf.steps else 1
            names += [c, *(replica_name(c, r) for r in range(1, n))]
            gangs += [c] if n > 1 and s.state == LAUNCHING else []
    killed = backend.settle_launches(names)
    states = backend.poll(run_id) if gangs else {}
    partial = [c for c in gangs if (st := states.get(c)) is not None and st.status.endswith(REPLICA_MISSING)]
    if partial:
        backend.release(partial)
    said = [f"killed {len(killed)} launch(es) the last executor left that never finished"] if killed else []
    said += [f"removed the part of {len(partial)} gang launch(es) the last executor did not finish"] if partial else []
    if said:
        message = f"{'; '.join(said)}: {', '.join([*killed, *partial][:5])}"
        record(store, Note(0, run_id, time.time(), message, None, "collected"))


def reconcile(attempts: Attempts) -> None:
    """Before the first dispatch of an executor: adopt the run's attempts left in flight,
    and remove containers and gang networks the last executor left behind once their results
    were stored (it removes them in batches, after the fact)."""
    store, run_id, wf = attempts.store, attempts.run_id, attempts.wf
    states = attempts.backend.poll(run_id)
    in_flight: set[str] = set()
    for s in store.steps(run_id, (LAUNCHING, RUNNING)):
        history = store.attempts(run_id, s.step)
        if not history:
            store.set_step(run_id, s.step, state=WAITING, not_before=None)
            continue
        a = history[-1]
        in_flight.add(a.container)
        st = refine(attempts.paths, states, s.step, a.attempt, a.container)
        variant = wf.steps[s.step].resolved_variants()[a.variant]
        n = wf.steps[s.step].replicas  # a gang holds every replica's share
        r = variant.resources
        elastic = (g := wf.steps[s.step].gang) is not None and g.elastic is not None
        if elastic and r.cpus and a.cpus:  # an elastic gang may run fewer (its attempt says how many)
            n = min(n, max(1, round(a.cpus / r.cpus)))
        act = Active(s.step, a.attempt, a.container, r.cpus * n, r.memory * n, a.gpu_uuids, why=s.reason or "")
        act.replicas = n
        act.resize = a.message if a.message.startswith(RESIZED) else ""  # stopped to grow (``execute.elastic``)
        act.measured = is_batch(a.container)  # a batch's usage is not one item's
        if act.why.startswith(QUEUED_PREFIX):
            # shown queued when the last executor ended: the next poll says whether it still is
            act.why, act.waiting = "", act.why.removeprefix(QUEUED_PREFIX)
        if st is not None and st.running:
            attempts.hold(act)
            attempts.watch_gpus(act)  # sampled from now on: what ran before hetflow came back is not seen
            store.set_step(run_id, s.step, state=RUNNING, event=f"adopted running container {a.container}")
            store.set_attempt(run_id, s.step, a.attempt, state=RUNNING)
        elif s.state == RUNNING and _restorable(attempts, s.step, st):
            # killed with the executor (a crash of the machine, kill -9 of everything): the
            # step's checkpoint is the work kept, so this is a lost attempt, not the step's failure
            attempts.hold(act)
            what = "disappeared" if st is None else f"was killed (exit {st.exit_code})"
            attempts.requeue(
                act, f"{a.container} {what} while hetflow was down; its checkpoint is restored", node_fault=True
            )
        elif st is not None:
            message = f"{a.container} finished while hetflow was down (exit {st.exit_code})"
            message = f"{a.container}: {st.reason}; it runs again" if st.never_started else message
            record(store, Note(0, run_id, time.time(), message, s.step, "collected"))
            attempts.hold(act)
            attempts.settle(act, st)  # a node that failed meanwhile: run again, as in the loop
        elif s.state == LAUNCHING:
            # The intent was written but the container never started: launch the same
            # attempt again under the same name.
            store.release_gpus(a.container)
            store.set_step(
                run_id,
                s.step,
                state=WAITING,
                attempts=a.attempt - 1,
                not_before=None,
                event=f"{a.container} was never started; launching it again",
            )
        else:
            attempts.hold(act)
            attempts.fail(act, None, f"container {a.container} disappeared while hetflow was down")
    leftover = sorted(set(states) - in_flight)
    if leftover:
        attempts.backend.release(leftover)
        message = f"removed {len(leftover)} finished container(s) the last executor left: {', '.join(leftover[:5])}"
        record(store, Note(0, run_id, time.time(), message + (" ..." if len(leftover) > 5 else ""), None, "collected"))
    _drop_stale_networks(attempts, in_flight)


def _restorable(attempts: Attempts, step: str, st: JobState | None) -> bool:
    """Whether an attempt that ended while hetflow was down was lost rather than failed: it
    was killed by a signal (or is gone), its step has CRIU checkpoints and one was taken,
    and the step's lost attempts are not used up."""
    killed = st is None or (st.exit_code is not None and st.exit_code > 128)
    c = attempts.wf.steps[step].checkpoint if step in attempts.wf.steps else None
    if not killed or c is None or not c.transparent or (st is not None and st.running):
        return False
    if attempts.store.node_faults(attempts.run_id, step) >= NODE_FAULT_REQUEUES:
        return False
    return CheckpointImages(attempts.paths).latest(step) is not None


def _drop_stale_networks(attempts: Attempts, in_flight: set[str]) -> None:
    """Gang networks of this run that no attempt in flight uses (a backend that makes them:
    ``DropsNetworks.drop_networks`` says when they are left).  A run with no attempt stored
    has made none (each is made after its attempt is stored): the engine is not asked."""
    if not isinstance(attempts.backend, DropsNetworks) or not attempts.store.has_attempts(attempts.run_id):
        return
    stale = attempts.backend.drop_networks(attempts.run_id, in_flight)
    if stale:
        message = f"removed {len(stale)} gang network(s) the last executor left: {', '.join(stale[:5])}"
        record(attempts.store, Note(0, attempts.run_id, time.time(), message, None, "collected"))


def stop_run(
    store: Store,
    backend: Backend,
    run_id: str,
    *,
    grace: int | None = None,
    reason: str = "stopped by hetflow stop",
    stopped: Collection[str] = (),
    alive: Callable[[int], bool] = pid_alive,
    checkpoint: bool = False,
    attempts: Attempts | None = None,
) -> list[str]:
    """`hetflow stop`: end the executor, stop the run's containers (cancel its jobs), record
    it all.  Returns the names of the jobs stopped.  ``grace``: the seconds every job has
    between SIGTERM and SIGKILL (None: each step's ``stop_grace``, else the engine's
    default; ``stopping.by_grace``).  An executor stopping its own
    run (on SIGINT or SIGTERM) calls it too, with its ``reason`` and the jobs it ``stopped``
    itself already (a second signal's kill): those are recorded stopped, not kept.

    Only attempts still running are stopped.  After a crash, an attempt the store calls
    running may have finished while hetflow was down: its container is kept and its step
    left as it is, so that ``resume`` collects the result (``reconcile``) instead of running
    the step again.  Containers of attempts that are over (results stored, removal pending)
    are simply removed.  ``checkpoint`` (``hetflow stop --checkpoint``): the attempts of
    steps with CRIU checkpoints are dumped (which stops them) first, so resume restores them.

    A live executor is asked to stop its run itself (``stopping.executor_stops``), and
    does so calling this with its ``attempts``: an attempt whose job ended before the stop, or
    during it with exit 0, is then settled as the loop settles one (its outputs accepted:
    succeeded), not recorded stopped; nothing stays running in the stopped run."""
    run = store.run(run_id)
    if attempts is None and run.pid and run.pid != os.getpid() and alive(run.pid):
        by_executor = executor_stops(store, run, StopRequest(grace, checkpoint), alive)
        if by_executor is not None:
            return by_executor
    now = time.time()
    # This process holds the run while it stops it: a resume meanwhile is refused (the
    # claim is a live pid) instead of being undone by the steps recorded stopped below; the
    # run is marked stopped once they are (seen on the dashboard: Resume clicked as soon as
    # the run showed stopped failed its step).
    store.set_run(run_id, pid=os.getpid(), pid_start=process_start(os.getpid()), message=f"stopping: {reason}")
    before = backend.poll(run_id)  # read before stopping anything: what had already ended
    in_flight = [a for a in store.attempts(run_id) if a.state in (LAUNCHING, RUNNING)]
    paths = RunPaths(Path(run.workdir))
    seen = {(a.step, a.attempt): refine(paths, before, a.step, a.attempt, a.container) for a in in_flight}
    done = {k: st for k, st in seen.items() if st is not None and not st.running}
    ended = [a for a in in_flight if (a.step, a.attempt) in done and a.container not in stopped]
    live = [a for a in in_flight if a not in ended]
    own = _settled(attempts, [(a, done[(a.step, a.attempt)]) for a in ended])  # ended before the stop
    ended = [a for a in ended if (a.step, a.attempt) not in own]
    if checkpoint:
        _dump_for_resume(store, backend, run, [a for a in live if a.container not in stopped])
    cancel_by_grace(backend, by_grace([(a.step, a.container) for a in live], step_graces(run.spec_json), grace))
    states = backend.poll(run_id)
    after = {(a.step, a.attempt): refine(paths, states, a.step, a.attempt, a.container) for a in live}
    # ended during the stop by its own exit 0 with its outputs (a SIGTERM handler that saved and
    # finished): its result; one that quit without them was stopped
    own |= _settled(
        attempts,
        [
            (a, st)
            for a in live
            if (st := after[(a.step, a.attempt)]) and _own_exit_0(st, a, stopped) and _with_outputs(attempts, a)
        ],
    )
    live = [a for a in live if (a.step, a.attempt) not in own]
    names = list(dict.fromkeys(a.container for a in live))  # a batch's items share its container
    _record_stopped(store, run_id, [(a, after[(a.step, a.attempt)]) for a in live], now)
    _record_kept(store, run_id, [(a, done[(a.step, a.attempt)]) for a in ended], now)
    keep = {a.step for a in ended}
    for s in store.steps(run_id):
        if s.state in (LAUNCHING, RUNNING, WAITING) and s.step not in keep:
            with contextlib.suppress(StateError):
                store.set_step(run_id, s.step, state=STOPPED, ended=now, reason=reason, event=reason)
    over = sorted(set(before) - {a.container for a in in_flight})  # results stored, removal pending
    kept = {a.container for a in ended}  # a batch with an item left to collect stays for resume
    backend.release([*(n for n in names if n not in kept), *over])
    store.set_run(run_id, state=RUN_STOPPED, ended=now, pid=None, message=reason)
    record(store, RunStateChanged(0, run_id, now, f"stopped; {len(names)} container(s) stopped", RUN_STOPPED))
    return names


def _record_stopped(
    store: Store, run_id: str, stops: Sequence[tuple[AttemptRecord, JobState | None]], now: float
) -> None:
    for a, st in stops:
        code = st.exit_code if st else None
        store.set_attempt(run_id, a.step, a.attempt, state=STOPPED, ended=now, exit_code=code, message="stopped")
        record(store, AttemptFinished(0, run_id, now, "stopped", a.step, a.attempt, STOPPED, code))
        store.release_gpus(a.container)


def _record_kept(store: Store, run_id: str, ends: Sequence[tuple[AttemptRecord, JobState]], now: float) -> None:
    """Attempts that ended while no executor ran, left for ``resume`` to collect (``reconcile``)."""
    for a, st in ends:
        store.release_gpus(a.container)  # the container is over; finalize on resume releases again (no-op)
        message = (
            f"{a.container} finished while hetflow was down (exit {st.exit_code}); kept for 'hetflow resume' to collect"
        )
        record(store, Note(0, run_id, now, message, a.step, "collected"))


def _own_exit_0(st: JobState, a: AttemptRecord, stopped: Collection[str]) -> bool:
    """The job ended by its own exit 0 (not one a second signal's kill ended)."""
    return not st.running and st.exit_code == 0 and a.container not in stopped


def _with_outputs(attempts: Attempts | None, a: AttemptRecord) -> bool:
    """The attempt's declared outputs are all there: in its staging folder, or where a job that
    publishes them itself put them (``Attempts.finalize`` looks in the same places)."""
    step = attempts.wf.steps.get(a.step) if attempts is not None else None
    if attempts is None or step is None:
        return False
    staging = attempts.paths.staging(a.step, a.attempt)
    return not missing_outputs(staging if staging.exists() else attempts.paths.step_out(a.step), step.outputs)


def _settled(attempts: Attempts | None, ends: Sequence[tuple[AttemptRecord, JobState]]) -> set[tuple[str, int]]:
    """Settle the executor's attempts whose jobs ended (``Attempts.settle``: accepted, retried
    or failed, as its loop would); the (step, attempt) of each settled.  None: a stopper
    without the run's attempts settles nothing."""
    done: set[tuple[str, int]] = set()
    if attempts is None:
        return done
    for a, st in ends:
        act = attempts.active.get(a.step)
        if act is not None and act.attempt == a.attempt:
            attempts.settle(act, st)
            done.add((a.step, a.attempt))
    return done


def _dump_for_resume(store: Store, backend: Backend, run: RunRecord, live: Sequence[AttemptRecord]) -> None:
    """``stop --checkpoint``: dump each attempt of a step with CRIU checkpoints (stopping it);
    one that cannot be dumped is said in a note and stopped as any other."""
    steps = checkpointed_steps(run)
    images = CheckpointImages(RunPaths(Path(run.workdir)))
    for a in live:
        if a.step not in steps and (fanout_parent(a.step) or "") not in steps:
            continue
        if not isinstance(backend, Checkpoints):
            message = f"the {backend.capabilities.name} backend cannot checkpoint {a.container}; it is stopped"
        else:
            part = images.part(a.step, a.attempt)
            try:
                took = backend.checkpoint(a.container, part, leave_running=False)
                saved = images.commit(a.step, a.attempt, a.container, part, took)
                message = f"checkpoint of {a.container} for resume: {format_bytes(saved.size)} in {took:.2f}s"
            except HetflowError as exc:
                part.unlink(missing_ok=True)
                message = f"{exc}; {a.container} is stopped without a checkpoint"
        record(store, Note(0, run.id, time.time(), message, a.step, "checkpoint"))


def checkpointed_steps(run: RunRecord) -> set[str]:
    """The steps of the run's recorded workflow with CRIU checkpoints (``checkpoint:``, not
    ``mode: app``), read from its JSON without validating it again (``logsources`` does too)."""
    steps = recorded_steps(run.spec_json).items()
    return {n for n, s in steps if isinstance(c := s.get("checkpoint"), dict) and c.get("mode", "criu") == "criu"}


def spawn_executor(store: Store, run_id: str, argv: Sequence[str], *, log: Path, env: Mapping[str, str]) -> int:
    """Start ``argv``, the run's detached executor (``run -d``, ``resume -d``), in a session
    of its own with its output appended to ``log``, and make it the run's holder before
    returning its pid: from then on ``ps`` and ``resume`` see the run held by a live process,
    not one left by a dead executor while the new one is still starting (its own claim, of
    the same pid, then changes nothing).  When another live process claimed the run in the
    meantime (a second ``resume`` at once), the new executor is killed and StateError says
    who holds the run."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(env),
        )
    try:
        store.claim_run(run_id, proc.pid, pid_alive, start=process_start(proc.pid))
    except StateError:
        proc.kill()
        proc.wait()
        raise
    return proc.pid
