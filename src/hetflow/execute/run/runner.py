"""The runner loop: dispatch ready steps, poll the engine, finalize, retry, persist.

One loop, one process per run.  Every decision is written to the state store before it
is acted on (the attempt row with its deterministic container name comes before
``podman run``), so a run killed at any instant can be resumed: ``lifecycle.reconcile``
adopts containers still running, collects exit codes of those that finished meanwhile,
and re-launches intents that never reached the engine.

Where a step runs is the dispatch strategy's answer (``dispatch``); what happens when
an attempt ends is ``attempts``; stop and resume are ``lifecycle``.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType

from hetflow.execute.backends.base import Backend, WatchesNewRuns
from hetflow.execute.checkpoint.app import SaveRequests
from hetflow.execute.data.fanout import expand_ready
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.data.watch import DataWatch
from hetflow.execute.gang.elastic import with_replicas
from hetflow.execute.run.attempts import Attempts
from hetflow.execute.run.batching import is_batch
from hetflow.execute.run.conditions import condition_holds
from hetflow.execute.run.control.lifecycle import reconcile, settle_launches, stop_run
from hetflow.execute.run.control.moves import Moves
from hetflow.execute.run.control.stopping import clear_stop_request, stop_request, stop_requested
from hetflow.execute.run.dispatching.cachepass import CachePass
from hetflow.execute.run.dispatching.decisions import Decisions
from hetflow.execute.run.dispatching.dispatch import Dispatch
from hetflow.execute.run.dispatching.growth import ElasticGangs
from hetflow.execute.run.launch.batch import Batcher
from hetflow.execute.run.launch.launcher import Launcher
from hetflow.execute.run.options import Reporter
from hetflow.execute.run.retries import adjusted
from hetflow.execute.settings import RunnerConfig
from hetflow.execute.submit.runplan import keep_data
from hetflow.inventory import Node
from hetflow.spec import (
    SKIPPED_BY_CONDITION,
    Workflow,
    edges_of,
    pending_source,
    topo_order,
)
from hetflow.state import (
    DATA_CHANGED,
    FAILED,
    PENDING,
    RUN_FAILED,
    RUN_RUNNING,
    RUN_STOPPED,
    RUN_SUCCEEDED,
    SKIPPED,
    STEP_TERMINAL,
    STOPPED,
    SUCCEEDED,
    WAITING,
    Note,
    RunRecord,
    RunStateChanged,
    StepRecord,
    Store,
    StoreFull,
    process_start,
)

__all__ = ["RunParts", "Runner", "RunnerConfig", "ordered", "waiter"]


def ordered(workflow: Workflow, priority: Mapping[str, float]) -> list[str]:
    """The order ready steps are dispatched in: the plan's ranks (``priority``), else file order."""
    topo = topo_order(edges_of(workflow))
    if not priority:
        return topo
    return sorted(topo, key=lambda n: priority.get(n, float("inf")))


def waiter(wake: threading.Event) -> Callable[[float], None]:
    """The runner's sleep: until the engine reports an exit (``wake``), or ``timeout``."""

    def wait(timeout: float) -> None:
        if wake.wait(timeout):
            wake.clear()

    return wait


@dataclass(frozen=True)
class RunParts:
    """Everything a ``Runner`` works with, built whole by the composition root
    (``compose.compose_runner``): the run's seams, its records and its collaborators."""

    store: Store
    node: Node
    run: RunRecord
    backend: Backend
    paths: RunPaths
    reporter: Reporter
    config: RunnerConfig
    clock: Callable[[], float]
    alive: Callable[[int], bool]
    sleep: Callable[[float], None]
    wake: threading.Event  # set when the engine reports an exit, or a signal comes
    pid: int
    priority: dict[str, float]
    order: list[str]
    watch: DataWatch  # the run's data, looked at as steps launch and end
    grace: int | None  # SIGINT/SIGTERM: the first stops the run (each container given ``grace``)
    attempts: Attempts  # owns the run's mutable state: the workflow, attempts in flight, next attempts
    dispatch: Dispatch
    launcher: Launcher
    moves: Moves  # periodic checkpoints, hetflow migrate
    batcher: Batcher
    decisions: Decisions  # the turn's answers for a fan-out's many items
    elastic: ElasticGangs
    cached: CachePass  # the turn's steps taken from the cross-run cache at once
    saves: SaveRequests  # checkpoint: {mode: app, every}: SIGUSR1


class Runner:
    """Runs one run to its end, with the parts ``compose.compose_runner`` built for it (local
    runs: an engine and the plan's variants; cluster runs: a backend that assigns GPUs, with the
    plan's placements and machine classes)."""

    def __init__(self, parts: RunParts) -> None:
        """Only stores what it is given, and the loop's own state (signals, the order)."""
        self.store, self.node, self.backend = parts.store, parts.node, parts.backend
        self.run_id, self.uid, self.gid = parts.run.id, parts.run.uid, parts.run.gid
        self.paths, self.reporter, self.config = parts.paths, parts.reporter, parts.config
        self.clock, self.alive, self.sleep, self._wake = parts.clock, parts.alive, parts.sleep, parts.wake
        self.pid, self.priority, self.order = parts.pid, parts.priority, parts.order
        self.watch, self.grace = parts.watch, parts.grace
        self.attempts, self.dispatch, self.launcher = parts.attempts, parts.dispatch, parts.launcher
        self.moves, self.batcher, self.decisions = parts.moves, parts.batcher, parts.decisions
        self.elastic, self.cached, self.saves = parts.elastic, parts.cached, parts.saves
        self.signalled: int | None = None  # the first signal's number
        self.handed_off = False  # that signal was `hetflow stop`'s: the stopper owns the containers
        self._killer: threading.Thread | None = None
        self._killed: set[str] = set()  # what the second signal's kill ended: stops, not exits

    @property
    def wf(self) -> Workflow:
        """The run's workflow, as its attempts' owner holds it (fan-outs expanded so far)."""
        return self.attempts.wf

    # --- the loop ---------------------------------------------------------------------

    def execute(self) -> str:
        """Run to the end; returns the run's final state."""
        self.store.claim_run(self.run_id, self.pid, self.alive, start=process_start(self.pid))
        self.store.adopt_leases(self.run_id, self.pid)
        self.attempts.emit(
            RunStateChanged(0, self.run_id, self.clock(), f"executor {self.pid} on {self.node.name}", RUN_RUNNING)
        )
        settle_launches(self.attempts)  # before the watch lists the run's containers
        stop_watch = self._watch()
        interval = self.config.poll_interval if stop_watch is None else max(0.5, self.config.poll_interval)
        clear_stop_request(self.paths)  # one left by a stopper whose executor had gone already
        self.watch.new_turn()  # a look that checks an exit is never older than the exit
        reconcile(self.attempts)
        try:
            while True:
                if self.signalled is not None:
                    return self._stop_on_signal()
                if self._stop_requested():
                    return RUN_STOPPED
                self.watch.new_turn()
                self.attempts.poll()
                self._data_changes()
                self.moves.turn()
                self.saves.tick(self.attempts.active.values(), self.wf.steps)
                for name in self.elastic.turn():  # a gang stopped to grow starts again before others take its room
                    if (s := self.store.step(self.run_id, name)).state == WAITING:
                        self._try_launch(name, s)
                self._expand_ready()
                self.decisions.new_turn()
                self.cached.run(self.wf, self.order, self.dispatch, self.attempts.next, self.attempts.active)
                self._schedule()
                self.attempts.flush_removals(now=False)
                self.attempts.store_usage()
                steps = self.store.steps(self.run_id)
                self.reporter.update(self.store.run(self.run_id), steps)
                if all(s.state in STEP_TERMINAL for s in steps) and not self.attempts.active:
                    return self._finish(steps)
                self.sleep(self._next_wait(steps, interval))
        except StoreFull as exc:
            # The store cannot record what happens next: stop the run rather than let its containers
            # finish unrecorded, recorded as `hetflow stop` would in the room the store kept for it
            # (its reserve); with none, the containers are stopped all the same.  What is stored stays
            # (each write is one transaction).
            self.store.release_reserve()
            try:
                stop_run(self.store, self.backend, self.run_id)
                self.store.set_run(self.run_id, message=f"stopped: {exc}")
            except StoreFull:
                self.backend.cancel([a.container for a in self.attempts.active.values()])
            raise StoreFull(
                f"{exc}. The run was stopped; once there is room, 'hetflow resume {self.run_id}' continues it"
            ) from None
        finally:
            self.moves.close()
            self.elastic.close()
            self.attempts.close_gpu_sampler()
            self.attempts.flush_removals()
            if stop_watch is not None:
                stop_watch()  # waits for the removals (and the usage read before each)
            with contextlib.suppress(StoreFull):  # the usage of a store that is full stays unknown
                self.attempts.store_usage()
            self.reporter.close()

    def _watch(self) -> Callable[[], None] | None:
        """The backend's watch of the run; one with no attempt stored has no job to list."""
        if isinstance(self.backend, WatchesNewRuns) and not self.store.has_attempts(self.run_id):
            return self.backend.watch_new(self.run_id, self._wake.set)
        return self.backend.watch(self.run_id, self._wake.set)

    def _next_wait(self, steps: list[StepRecord], interval: float) -> float:
        """The poll interval, shortened to the next retry's backoff deadline."""
        now = self.clock()
        due = [s.not_before - now for s in steps if s.state == WAITING and s.not_before]
        return max(0.0, min([interval, *due]))

    def install_signal_handlers(self) -> None:
        """SIGINT (Ctrl-C) and SIGTERM (systemd, Slurm, Kubernetes, ``timeout``) stop the
        run as ``hetflow stop`` does: the loop ends at its next turn and stops the run's
        containers, each given the grace to save its work (``_stop_on_signal``).  A SIGTERM
        that ``hetflow stop`` sent (it leaves a stop request first) stops it the same way,
        with the grace and ``--checkpoint`` the request says, while the stopper waits.  A
        second signal kills every container of the run at once (``_kill_all``).  The handler
        never writes the store, so whatever it interrupts, the state is never half-written."""
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled is None:
            self.signalled = signum
            self.handed_off = stop_requested(self.paths)
            # the loop's sleep ends now, not at its next poll (set on a thread: see below)
            threading.Thread(target=self._wake.set, name="signal-wake", daemon=True).start()
            return
        if self.handed_off or (self._killer is not None and self._killer.is_alive()):
            return
        self.grace = 0  # a stop not begun yet kills at once too
        # On a thread of its own: the handler runs on the main thread between two of its
        # bytecodes, maybe while it holds a lock the engine's poll takes.
        self._killer = threading.Thread(target=self._kill_all, name="kill-run", daemon=True)
        self._killer.start()

    def _kill_all(self) -> None:
        """Kill every container (cancel every job) of the run the engine says is running,
        now (a grace of 0: ``podman stop --time 0``, which also ends a stop in progress)."""
        with contextlib.suppress(Exception):  # the stop in progress cancels what this missed
            live = [name for name, st in self.backend.poll(self.run_id).items() if st.running]
            self._killed.update(live)  # before the kill: an exit seen from now on may be its
            self.backend.cancel(live, 0)

    def _stop_on_signal(self) -> str:
        """Stop the run (as ``hetflow stop`` asked: its grace and ``--checkpoint``).  ``stop_run``
        settles, with the executor's attempts, the jobs that ended before the stop and those
        that exit 0 during it, so a step that finished is recorded finished (its outputs
        accepted, not run again on resume), whichever signal came; a second signal's kills
        are stops."""
        assert self.signalled is not None
        asked = stop_request(self.paths) if self.handed_off else None
        if self.store.run(self.run_id).pid != self.pid:
            return RUN_STOPPED  # a stopper that did not wait for this executor stops the run itself
        by = "hetflow stop" if asked is not None else signal.Signals(self.signalled).name
        self.watch.new_turn()  # a look that checks an exit is never older than the exit
        grace, dump = (asked.grace, asked.checkpoint) if asked is not None else (self.grace, False)
        stop_run(self.store, self.backend, self.run_id, grace=grace, reason=f"stopped by {by}",
                 stopped=self._killed, checkpoint=dump, attempts=self.attempts)  # fmt: skip
        if self._killer is not None:
            self._killer.join()  # a second signal's kill: its containers are gone before the executor ends
        return RUN_STOPPED

    def _stop_requested(self) -> bool:
        return self.store.run(self.run_id).state == RUN_STOPPED

    def _finish(self, steps: list[StepRecord]) -> str:
        excused = [s for s in steps if self.wf.steps[s.step].optional or s.reason.startswith(SKIPPED_BY_CONDITION)]
        # each counted under its own state: a step skipped because one before it failed never ran
        parts = [
            (word, [s.step for s in steps if s.state == state and (state != SKIPPED or s not in excused)])
            for word, state in (("failed", FAILED), ("stopped", STOPPED), ("skipped", SKIPPED))
        ]
        if any(names for _, names in parts):
            state = RUN_FAILED
            msg = "; ".join(f"{word}: {', '.join(names)}" for word, names in parts if names)
        else:
            state, msg = RUN_SUCCEEDED, "all steps succeeded"
        now = self.clock()
        self.store.set_run(self.run_id, state=state, ended=now, message=msg, pid=None)
        self.attempts.emit(RunStateChanged(0, self.run_id, now, msg, state))
        return state

    # --- fan-outs known at run time ------------------------------------------------------

    def _expand_ready(self) -> None:
        """Expand each pending fan-out whose upstream step has succeeded (``fanout.expand_ready``)."""
        for wf, name, names in expand_ready(self.store, self.run_id, self.wf, self.paths, self.clock):
            self._set_workflow(wf, name, names)

    def _set_workflow(self, wf: Workflow, parent: str, items: Sequence[str]) -> None:
        self.priority.update({item: self.priority[parent] for item in items if parent in self.priority})
        self.attempts.set_workflow(wf)  # the launcher, moves and growth read it there
        self.batcher.set_workflow(wf)
        self.dispatch.inherit(parent, items)
        self.order = ordered(wf, self.priority)

    # --- dispatch ---------------------------------------------------------------------

    def _schedule(self) -> None:
        steps = {s.step: s for s in self.store.steps(self.run_id)}
        now = self.clock()
        for name in self.order:
            s = steps[name]
            if s.state not in (PENDING, WAITING) or name in self.attempts.active:
                continue
            deps = self.wf.steps[name].dependencies()
            broken = [d for d in deps if steps[d].state in (FAILED, SKIPPED, STOPPED)]
            if broken:
                why = f"upstream step {broken[0]!r} {steps[broken[0]].state}"
                if all(steps[d].reason.startswith(SKIPPED_BY_CONDITION) for d in broken):
                    why = SKIPPED_BY_CONDITION + why  # skipped as its parent was: not a failure
                self.store.set_step(self.run_id, name, state=SKIPPED, ended=now, reason=why, event=f"skipped: {why}")
                steps[name] = self.store.step(self.run_id, name)
                continue
            if pending_source(self.wf.steps[name]) is not None:
                continue  # a fan-out waiting for its list: it runs as its items, once expanded
            if not all(steps[d].state == SUCCEEDED or self._submitted_ahead(d) for d in deps):
                continue
            if s.not_before and s.not_before > now:
                continue
            if self.wf.steps[name].when is not None and not condition_holds(
                self.store, self.run_id, self.wf, self.paths, name, steps, self.clock
            ):
                steps[name] = self.store.step(self.run_id, name)
                continue
            if self._try_launch(name, s):
                steps[name] = self.store.step(self.run_id, name)  # from the cache: its children may go now
        self.batcher.launch()  # the fan-out items this pass held for batches

    def _submitted_ahead(self, step: str) -> bool:
        """With an engine that holds the DAG's order (Slurm afterok), a child is submitted as soon
        as its parent is, unless that is an item of a batch (its outputs are in place once collected)."""
        act = self.attempts.active.get(step)
        return self.backend.capabilities.holds_dependencies and act is not None and not is_batch(act.container)

    def _try_launch(self, name: str, s: StepRecord) -> bool:
        """Launch the step, or take its result from the cache (True)."""
        if self.batcher.full(name):
            return False  # its fan-out has as many items held for batches as can start now
        nxt = self.attempts.next.get(name)
        step = adjusted(self.wf.steps[name], nxt)
        decision = self.decisions.decide(name, step, nxt is not None)
        if decision.replicas is not None:  # an elastic gang: as many replicas as fit now
            step = with_replicas(step, decision.replicas)
        if decision.variant is not None:
            if self.cached.take_one(self.wf, name, decision.variant):
                return True
            if nxt is None and self.batcher.defer(name, s, step, decision):
                return False
            change = nxt.describe() if nxt is not None else ""
            why = decision.why + (f"; retry: {change}" if change else "")
            self.launcher.launch(name, s, decision.variant, decision.gpus, why, decision.slot, step, change)
        elif decision.wait:
            if s.reason != decision.why:
                self.store.set_step(self.run_id, name, reason=decision.why)
        else:
            self._no_fit(name, decision.why)
        return False

    # --- what the turn's looks found ------------------------------------------------------

    def _data_changes(self) -> None:
        """Say what the turn's looks found changed in the run's data, and keep the data as
        found with the run's plan (what ``hetflow resume`` compares with)."""
        said = self.watch.said()
        if said:
            keep_data(self.store, self.run_id, self.watch.manifest)
        for line in said:
            why = f"{line} since the run was submitted: the steps that launch from now on read it as it is now"
            self.attempts.emit(Note(0, self.run_id, self.clock(), why, None, DATA_CHANGED))

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
