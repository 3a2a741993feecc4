"""What a queueing engine (Slurm, Ray, Kubernetes) says of an attempt in flight, written where
``hetflow show`` reads it, on every poll (``Attempts.poll``): when its job started and ended by
the engine's own record, what it waits for while the engine queues it, and the GPUs the engine
gave it.  Each is true for as long as it is shown: a wait ends when the job runs or ends (a
job that ended between two polls never showed running: its "pending: ContainerCreating" would
otherwise stay on the finished step), and the GPUs are the engine's, not the plan's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from hetflow.execute.backends.base import JobState
from hetflow.execute.backends.capabilities import Capabilities
from hetflow.state import Store

__all__ = ["EngineView", "InFlight"]


class InFlight(Protocol):
    """What is read and kept of an attempt in flight (``attempts.Active``)."""

    step: str
    attempt: int
    container: str
    why: str  # the step's reason when it was launched
    waiting: str  # what the engine last said it waits for
    started: float | None
    ended: float | None
    engine_gpus: tuple[int | str, ...]


class EngineView:
    """Writes what the engine says of the run's attempts in flight (``saw``) to the store."""

    def __init__(self, store: Store, run_id: str, clock: Callable[[], float], capabilities: Capabilities) -> None:
        self.store, self.run_id, self.clock = store, run_id, clock
        self.queues = capabilities.queues  # the engine starts a job when it decides, not when asked
        self.assigns_gpus = capabilities.assigns_gpus  # and picks its GPUs (else hetflow leased them)
        self._ids: dict[tuple[str, int], str] = {}  # (step, attempt) -> the engine's id written

    def saw(self, act: InFlight, st: JobState) -> None:
        """The attempt's job as the engine's poll gave it (before it is settled, if it ended)."""
        self.note_id(act, st)
        self.note_times(act, st)
        self.note_gpus(act, st)
        if st.running and st.reason != act.waiting:
            self.note_wait(act, st.status, st.reason)
        elif not st.running and act.waiting:
            # over: what it waited for is no longer true, whatever its outcome says next
            act.waiting = ""
            self.store.set_step(self.run_id, act.step, reason=act.why)

    def note_id(self, act: InFlight, st: JobState) -> None:
        """The engine's own id of the attempt's job (Slurm's job id, ...), written once."""
        key = (act.step, act.attempt)
        if st.native_id and self._ids.get(key) != st.native_id:
            self._ids[key] = st.native_id
            self.store.set_attempt(self.run_id, act.step, act.attempt, native_id=st.native_id)

    def note_times(self, act: InFlight, st: JobState) -> None:
        """A queueing engine's own start and end of the job (Slurm's StartTime/EndTime, a Ray
        task's): the start is the attempt's run_started (its ``started`` stays the submission,
        the trace's submit) and the step's start (``show``'s STARTED: this attempt's), the end its ended."""
        if not self.queues:
            return  # this machine's engine starts the container when asked: the launch is its start
        if st.ended is not None and not st.running:
            act.ended = st.ended
        # a job said to run (no wait reason) with no time of the engine's counts from now
        started = st.started if st.started is not None or not st.running or st.reason else self.clock()
        if act.started is not None or started is None:
            return
        act.started = started
        self.store.set_attempt(self.run_id, act.step, act.attempt, run_started=started)
        if self.store.step(self.run_id, act.step).started is None:
            self.store.set_step(self.run_id, act.step, started=started)

    def note_gpus(self, act: InFlight, st: JobState) -> None:
        """The GPUs an engine that picks them says the job got (Ray's ``get_gpu_ids``, a pod's
        DRA devices or device-plugin GPUs): the step's GPUS from then on, once per change."""
        if not self.assigns_gpus or not st.gpus or st.gpus == act.engine_gpus:
            return
        act.engine_gpus = st.gpus
        self.store.set_step(self.run_id, act.step, gpus=list(st.gpus))

    def note_wait(self, act: InFlight, status: str, reason: str) -> None:
        """The engine queues the attempt and says why (Slurm's Resources or Dependency, a Ray
        gang's placement group): the step's reason shows it until the engine stops saying
        it, and each change is an event, so ``hetflow show`` and ``logs -f`` tell why a step
        (a gang waiting for all its nodes, say) has not started."""
        act.waiting = reason
        # "pending: ..." (QUEUED_PREFIX) is what shows the step as queued (StepRecord.shown_state)
        shown = f"{status.lower()}: {reason}" if reason else act.why
        event = f"{act.container} {status.lower()}: {reason}" if reason else f"{act.container} {status.lower()}"
        self.store.set_step(self.run_id, act.step, reason=shown, event=event)
