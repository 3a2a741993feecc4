"""Attempts in flight, and what happens when one ends: its outputs are accepted, or it is
retried after a doubling backoff, or the step fails.  Every outcome is persisted before
the next decision, so a run killed at any instant resumes from the store."""

from __future__ import annotations

import contextlib
import queue
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from hetflow.execute.backends.base import PUBLISH_FAILED_CODE, Backend, JobState, MeasuresOnRelease, MeasuresUsage
from hetflow.execute.data.diskfull import full_disk_reason, out_of_space, remove_partial
from hetflow.execute.data.fencing import Fenced
from hetflow.execute.data.outputs import accept_outputs, missing_message, missing_outputs
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.data.publishing.publish import PublishError, Publishing
from hetflow.execute.devices.usage import AttemptGpus
from hetflow.execute.engine import Usage
from hetflow.execute.logs import log_tail
from hetflow.execute.run.batching import held_outputs, is_batch, note_start, refine, stage
from hetflow.execute.run.engineview import EngineView
from hetflow.execute.run.lostattempts import LostAttempts
from hetflow.execute.run.retries import OOM_EXIT, Failure, Hints, Limits, NextAttempt, after_failure, exit_reason
from hetflow.execute.secrets import scrub_logs
from hetflow.execute.settings import RunnerConfig
from hetflow.spec import Retry, Step, Workflow
from hetflow.state import (
    FAILED,
    STOPPED,
    SUCCEEDED,
    WAITING,
    AttemptFinished,
    Note,
    OutputRecord,
    RunEvent,
    Store,
    is_full,
    record,
)

Publisher = Callable[[str, Step, Path, int, int], list[str]]  # (step name, step, its outputs, uid, gid)


SUBMITTED = "submitted"  # what a queueing engine's job waits for before its first poll (``Launcher``)
# A step whose node fails under it runs again outside its retries this many times in all
# (counted from its recorded attempts, so ``hetflow resume`` does not restart the count, as it
# does the retry budget); after that a node fault counts as a failure, so a step that brings
# its nodes down (or a cluster losing every node) cannot loop forever.
NODE_FAULT_REQUEUES = 3
REMOVE_BATCH = 16  # finished containers removed together (``Attempts.flush_removals``)
REMOVE_WITHIN = 5.0  # seconds a finished container may wait for its batch


@dataclass
class Active:
    """An attempt handed to the engine (or about to be) and what it holds."""

    step: str
    attempt: int
    container: str
    cpus: float
    memory: int
    gpus: tuple[str, ...]  # leased GPU UUIDs
    measured: bool = False  # its usage was read (and its cgroup removed)
    why: str = ""  # the step's reason when it was launched (the variant's choice)
    variant: str = ""  # the variant it runs
    node: str = ""  # where (this machine, or the planned node class)
    replicas: int = 1  # containers of a gang (cpus and memory above count them all)
    change: str = ""  # what the step's retry policy changed for this attempt, in words
    resize: str = ""  # an elastic gang stopped to grow: why (``execute.elastic``; settled as a requeue)
    waiting: str = ""  # what the engine last said it waits for (Slurm's Reason, Ray's), if anything
    engine_gpus: tuple[int | str, ...] = ()  # the GPUs the engine last said it gave (``engineview``)
    # when a queueing engine started and ended its job, by its own record (``EngineView.note_times``)
    started: float | None = None
    ended: float | None = None


class Attempts:
    def __init__(
        self,
        *,
        store: Store,
        run_id: str,
        workflow: Workflow,
        paths: RunPaths,
        backend: Backend,
        config: RunnerConfig,
        clock: Callable[[], float],
        budget_start: dict[str, int],
        owner: tuple[int, int] = (0, 0),
        publisher: Publisher | None = None,
        on_success: Callable[[str, Sequence[OutputRecord]], None] | None = None,
        cluster: bool = False,
        limits: Callable[[str], Limits] | None = None,
    ) -> None:
        """``cluster``: a cluster plan (a failed node class can be avoided); ``limits``: what one
        node there holds, for a retry's growth to stop at (``retries.after_failure``)."""
        self.store, self.run_id, self.wf, self.paths = store, run_id, workflow, paths
        self.backend, self.config, self.clock = backend, config, clock
        # Retry budget counts attempts made by this executor session, so a resumed run
        # gets its retries again (as `snakemake --rerun-incomplete` would).
        self.budget_start = dict(budget_start)  # its own copy: requeues add to it
        self._active: dict[str, Active] = {}
        self.active: Mapping[str, Active] = MappingProxyType(self._active)  # read-only, live: hold, release
        self.owner = owner
        self.hints = Hints()  # advice on a final failure, each kind once a run
        self.publisher: Publisher = publisher or Publishing(store, run_id, workflow.name)
        self.on_success = on_success
        self._to_remove: list[str] = []
        self._remove_due: float | None = None  # when the oldest finished container must go
        self._measure: dict[str, tuple[str, int]] = {}  # container -> (step, attempt) whose usage is due
        self._measured: queue.SimpleQueue[tuple[str, Usage]] = queue.SimpleQueue()
        # step -> what its retry policy changed for its next attempt (``nextattempt``): read-only, live
        self._next: dict[str, NextAttempt] = {}
        self.next: Mapping[str, NextAttempt] = MappingProxyType(self._next)
        self.limits: Callable[[str], Limits] = limits or (lambda node: None)
        self.cluster = cluster
        self.gpus = AttemptGpus(store, run_id, here=backend.capabilities.leases_gpus_here)  # NVML sampling
        self.lost = LostAttempts(store, run_id, paths, backend, clock)  # given up: fenced; failed nodes
        self.view = EngineView(store, run_id, clock, backend.capabilities)  # what a queueing engine says

    def set_workflow(self, workflow: Workflow) -> None:
        """A fan-out expanded at run time: the run's workflow, its items added."""
        self.wf = workflow

    def hold(self, act: Active) -> None:
        """The attempt is in flight (launched, or adopted by ``lifecycle.reconcile``) until it settles."""
        self._active[act.step] = act

    def move_next(self, step: str, to: str | None, off: str) -> None:
        """``hetflow migrate`` moves the step's next attempt ``to`` a node, or (None) ``off`` its node."""
        prior = self._next.get(step) or NextAttempt()
        self._next[step] = replace(prior, move_to=to, lost_nodes=prior.lost_nodes | ({off} if not to else set()))

    def emit(self, event: RunEvent) -> None:
        """The runner's one way to add to the run's event stream."""
        record(self.store, event)

    def poll(self) -> None:
        self.lost.check()  # a lost attempt that ended since, its outputs discarded, is recorded so
        if not self.active:
            return
        states = self.backend.poll(self.run_id)
        acts = list(self.active.values())  # a pass that settles a batch's items records them in one commit:
        with self.store.transaction() if any(is_batch(a.container) for a in acts) else contextlib.nullcontext():
            for act in acts:
                st = refine(self.paths, states, act.step, act.attempt, act.container)
                if st is None:
                    self.fail(act, None, f"container {act.container} disappeared")
                    continue
                self.view.saw(act, st)  # its times, GPUs and wait, as the engine says
                if is_batch(act.container) and not st.running:  # its own start and end, not its batch's
                    act.ended = note_start(self.store, self.run_id, act.step, act.attempt, st)
                if not st.running:
                    self.settle(act, st)

    def settle(self, act: Active, st: JobState) -> None:
        """The engine says the attempt's job is over: requeue it when that was not the
        step's doing (a parent failed, the node failed), else accept or fail it."""
        if st.refused:  # as when ``submit`` raised (``Launcher.launch``): the engine's words, no exit code
            self.fail(act, None, st.reason)
        elif st.dependency_failed or st.checkpointed or st.never_started or (act.resize and st.exit_code != 0):
            self.requeue(act, act.resize or st.reason or "a dependency failed")
        elif st.node_failed and self.store.node_faults(self.run_id, act.step) < NODE_FAULT_REQUEUES:
            # counted from the recorded attempts (attempts.node_fault), so a resume does not restart it
            where = f" on {st.node}" if st.node else ""
            self.requeue(act, f"{st.status}{where}: {st.reason or 'the node failed'}", node_fault=True, lost=st.node)
        else:
            self.finalize(act, st.exit_code if st.exit_code is not None else 255, st.reason)

    def watch_gpus(self, act: Active) -> None:
        """Sample the GPUs of an attempt that runs on this machine (its container started,
        or was adopted) until it ends (``devices.usage.AttemptGpus``)."""
        self.gpus.watch(act.container, act.gpus)

    def close_gpu_sampler(self) -> None:
        self.gpus.close()

    def record_usage(self, act: Active) -> None:
        """Store what the attempt used, read before its container (and cgroup) is removed:
        where the backend reads it as it releases the container (podman), that happens
        off the runner's path and ``store_usage`` stores it; a run killed meanwhile leaves
        it unknown.  Backends that cannot measure leave it unknown (NULL), never a guess."""
        self.gpus.record(act.step, act.attempt, act.container)
        if not isinstance(self.backend, MeasuresUsage) or act.measured:
            return
        act.measured = True  # read once: the cgroup is gone after
        if isinstance(self.backend, MeasuresOnRelease):
            self._measure[act.container] = (act.step, act.attempt)
            return
        self._set_usage(act.step, act.attempt, self._timed(act, self.backend.usage(act.container)))

    @staticmethod
    def _timed(act: Active, u: Usage) -> Usage:
        """``u`` with the engine's start and end of the job where it has none of its own."""
        return replace(u, started=u.started or act.started, ended=u.ended or act.ended)

    def _set_usage(self, step: str, attempt: int, u: Usage) -> None:
        self.store.set_usage(
            self.run_id,
            step,
            attempt,
            peak_memory=u.peak_memory,
            cpu_seconds=u.cpu_seconds,
            image_id=u.image_id,
            run_started=u.started,
            run_ended=u.ended,
        )

    def store_usage(self) -> None:
        """Store the usage the backend has read since the last call (the store is this
        thread's; the backend may read it on another)."""
        while True:
            try:
                name, u = self._measured.get_nowait()
            except queue.Empty:
                return
            where = self._measure.pop(name, None)
            if where is not None:
                self._set_usage(*where, u)

    def finalize(self, act: Active, exit_code: int, reason: str = "") -> None:
        step = self.wf.steps[act.step]
        staging = self.paths.staging(act.step, act.attempt)
        final = self.paths.step_out(act.step)
        if exit_code == PUBLISH_FAILED_CODE and self.backend.capabilities.holds_dependencies and staging.exists():
            # the job exited 0 but left a declared output out, so it did not publish (``base.Publish``):
            # said as local says it, and recorded as the container's own exit 0
            unwritten = missing_outputs(staging, step.outputs)
            if unwritten:
                self.fail(act, 0, missing_message(unwritten))
                return
        if exit_code != 0:
            full = out_of_space(staging)  # removes the partial outputs of a step that filled its disk
            if full is not None:
                self.fail(act, exit_code, f"{exit_reason(exit_code)}: {full}", retry=False)
                return
            self.fail(act, exit_code, exit_reason(exit_code) + (f": {reason}" if reason else ""))
            return
        self.record_usage(act)
        held = held_outputs(self.paths, act.container, act.step, act.attempt) if is_batch(act.container) else None
        if held is not None:  # a batch item's outputs: renamed into place from its batch's folder
            staging = held
        elif not staging.exists() and final.exists():
            # the job published its outputs itself (``base.Publish``), or this executor crashed
            # after the rename, before the commit: they are verified and hashed where they are
            staging = final
        missing = missing_outputs(staging, step.outputs)
        if missing:
            self.fail(act, 0, missing_message(missing))
            return
        try:
            records = accept_outputs(
                self.run_id, act.step, staging, final, step.outputs, attempt=act.attempt, tidy=held is None
            )
        except Fenced as exc:  # hetflow gave this attempt up meanwhile (``data.fencing``)
            self.fail(act, 0, str(exc))
            return
        except OSError as exc:
            if not is_full(exc):
                raise
            self.fail(act, 0, full_disk_reason(staging, remove_partial(staging)), retry=False)
            return
        if step.publish:
            try:
                published = self.publisher(act.step, step, final, *self.owner)
            except PublishError as exc:
                self.fail(act, 0, f"exited 0, but its outputs could not be published: {exc}", retry=False)
                return
            self.emit(Note(0, self.run_id, self.clock(), "published " + "; ".join(published), act.step, "published"))
        if self.on_success is not None:
            self.on_success(act.step, records)
        now = self.clock()
        ended = act.ended if act.ended is not None else now  # the engine's end of the job, where it said
        self.store.succeed_step(self.run_id, act.step, act.attempt, records, ended, 0)
        self.emit(
            AttemptFinished(0, self.run_id, now, f"{act.container} succeeded", act.step, act.attempt, SUCCEEDED, 0)
        )
        self.release(act)

    def publish(self, name: str, out_dir: Path) -> bool:
        """Publish a step's outputs taken from the cache; a failure fails the step."""
        try:
            published = self.publisher(name, self.wf.steps[name], out_dir, *self.owner)
        except PublishError as exc:
            why = f"its cached outputs could not be published: {exc}"
            self.store.set_step(self.run_id, name, state=FAILED, ended=self.clock(), reason=why, event=why)
            return False
        self.emit(Note(0, self.run_id, self.clock(), "published " + "; ".join(published), name, "published"))
        return True

    def fail(self, act: Active, exit_code: int | None, message: str, retry: bool = True) -> None:
        """The attempt failed: retry after a backoff while the budget lasts (``retry``
        False: a failure running again cannot mend, such as a result that cannot be published)."""
        policy = self.wf.steps[act.step].retry_policy
        peak, oom = self._measure_now(act) if exit_code == OOM_EXIT and policy.memory else (None, None)
        self.record_usage(act)
        if is_batch(act.container):  # a batch item's outputs, kept where a failed attempt's are
            stage(self.paths, act.container, act.step, act.attempt)
        tail = log_tail(self.paths.log(act.step, act.attempt), 3)
        detail = f"{message}" + (f"; last output: {' | '.join(tail)}" if tail else "")
        now = self.clock()
        ended = act.ended if act.ended is not None else now  # the engine's end of the job, where it said
        self.store.set_attempt(
            self.run_id,
            act.step,
            act.attempt,
            state=FAILED,
            exit_code=exit_code,
            ended=ended,
            message=detail + (f" (retry: {act.change})" if act.change else ""),
        )
        self.emit(AttemptFinished(0, self.run_id, now, detail, act.step, act.attempt, FAILED, exit_code))
        self.lost.fence(act.step, act.attempt)  # whatever it still does, it never writes the step's outputs
        self.release(act)
        used, retries = act.attempt - self.budget_start.get(act.step, 0), policy.count
        if retry and used <= retries:
            if policy.backoff is not None:
                delay = policy.backoff.delay(used, self.config.retry_backoff, self.config.max_backoff)
            else:
                delay = min(self.config.retry_backoff * 2 ** (used - 1), self.config.max_backoff)
            failure = Failure(
                act.variant, act.node, exit_code, act.cpus / act.replicas, act.memory // act.replicas, oom, peak
            )
            changed = self._plan_next(act.step, failure)
            self.store.set_step(
                self.run_id,
                act.step,
                state=WAITING,
                not_before=now + delay,
                exit_code=exit_code,
                reason=f"attempt {act.attempt}: {detail}" + (f"; next attempt: {changed}" if changed else ""),
                event=f"attempt {act.attempt} failed ({detail}); retry {used} of {retries} in {delay:g}s"
                + (f"; {changed}" if changed else ""),
            )
        else:
            detail += self.hints.on_final_failure(self.wf.steps[act.step], act.variant, exit_code)
            self.store.set_step(
                self.run_id,
                act.step,
                state=FAILED,
                exit_code=exit_code,
                ended=ended,
                reason=detail,
                event=f"attempt {act.attempt} failed ({detail}); no retries left",
            )

    def requeue(self, act: Active, reason: str, *, node_fault: bool = False, lost: str | None = None) -> None:
        """A job dropped as its parent failed, lost with its node, stopped to grow (an elastic
        gang) or to move (migrate): not the step's failure.  Pending again (a new attempt name,
        outside the retry budget).  A node fault's attempt is recorded failed, never succeeded:
        the new attempt has its own name and staging, so the lost one's writes never count."""
        self.budget_start[act.step] = self.budget_start.get(act.step, 0) + 1
        now = self.clock()
        state = FAILED if node_fault else STOPPED
        policy = self.wf.steps[act.step].retry_policy
        if node_fault and policy.avoid_failed_node:
            # only where it runs changes: a lost node says nothing of the step's memory or variant
            only_node = policy.model_copy(update={"memory": None, "cpus": None, "fallback": ()})
            failure = Failure(act.variant, act.node, None, act.cpus, act.memory, node_fault=True)
            changed = self._plan_next(act.step, failure, only_node)
            reason += f"; next attempt: {changed}" if changed else ""
        if node_fault:
            self.record_usage(act)
            # fenced, cancelled, its node avoided by every later placement of the run (``ClusterDispatch``)
            self.lost.lose(act.step, act.attempt, act.container, lost)
        else:
            self.lost.fence(act.step, act.attempt)  # it never writes the step's outputs: a later attempt does
        said = reason + (f" (retry: {act.change})" if act.change else "")
        how = "lost with its node" if node_fault else "stopped to grow" if act.resize else "dropped by the engine"
        how = "checkpointed to move" if reason.startswith("migrated") else how
        how = "was made, not started" if reason.startswith("never started") else how
        faulted = {"node_fault": 1} if node_fault else {}
        self.store.set_attempt(self.run_id, act.step, act.attempt, state=state, ended=now, message=said, **faulted)
        self.emit(AttemptFinished(0, self.run_id, now, reason, act.step, act.attempt, state, None))
        self.release(act)
        self.store.set_step(
            self.run_id,
            act.step,
            state=WAITING,
            not_before=None,
            reason=f"requeued: {reason}",
            event=f"{act.container} {how} ({reason}); submitted again later",
        )

    def _measure_now(self, act: Active) -> tuple[int | None, bool | None]:
        """Read an attempt's usage before deciding its retry (peak memory and the engine's
        OOM flag are the out-of-memory evidence), instead of later as its container goes."""
        self.gpus.record(act.step, act.attempt, act.container)
        if act.measured or not isinstance(self.backend, MeasuresUsage):
            return None, None
        act.measured = True
        u = self._timed(act, self.backend.usage(act.container))
        self._set_usage(act.step, act.attempt, u)
        return u.peak_memory, u.oom_killed

    def _plan_next(self, name: str, failure: Failure, policy: Retry | None = None) -> str:
        """Work out the step's next attempt after ``failure``; say what changed (and
        record it as a run event), or "" when nothing did."""
        step = self.wf.steps[name]
        limits = self.limits(failure.node)
        if limits is not None and step.replicas > 1 and not self.cluster:
            # this one machine holds every replica of a gang: each may grow to its share only
            limits = (limits[0] / step.replicas, limits[1] // step.replicas)
        nxt = after_failure(
            step,
            policy or step.retry_policy,
            failure,
            self.next.get(name),
            limits,
            cluster=self.cluster,
        )
        self._next[name] = nxt
        changed = nxt.describe()
        if changed:
            self.emit(Note(0, self.run_id, self.clock(), f"next attempt: {changed}", name, "retry"))
        return changed

    def release(self, act: Active) -> None:
        self._active.pop(act.step, None)
        scrub_logs(self.paths.log(act.step, act.attempt))  # the step's secrets leave its log as ***
        if act.gpus:
            self.store.release_gpus(act.container)
        if is_batch(act.container) and any(a.container == act.container for a in self.active.values()):
            return  # a batch goes once the last of its items in flight is settled
        self._to_remove.append(act.container)
        if self._remove_due is None:
            self._remove_due = self.clock() + REMOVE_WITHIN

    def flush_removals(self, *, now: bool = True) -> None:
        """Remove finished containers in one engine call (their results are stored).  With
        ``now`` False, only once REMOVE_BATCH have finished or the oldest has waited
        REMOVE_WITHIN seconds: every podman command takes podman's lock, so removing (and
        measuring) each container as it ends would slow the next step's start."""
        due = self._remove_due is not None and self.clock() >= self._remove_due
        if self._to_remove and (now or due or len(self._to_remove) >= REMOVE_BATCH):
            names, self._to_remove, self._remove_due = self._to_remove, [], None
            if isinstance(self.backend, MeasuresOnRelease):
                measure = [n for n in names if n in self._measure]
                self.backend.release_measured(names, measure, lambda n, u: self._measured.put((n, u)))
            else:
                self.backend.release(names)
