"""Elastic gangs on this machine (``spec.fields.elastic``, ``execute.gang.elastic``): growing a gang
that started with fewer than ``max`` replicas once capacity frees up.

Each turn of the runner, for every elastic gang in flight with fewer than ``max`` replicas,
at most once every ``grow_every`` seconds (``RunnerConfig``, HETFLOW_GROW_EVERY) since its
attempt started: when the replicas it would add all fit in what is free now (counted by
``gang.elastic.grow_to``, then the variant chooser asked about the larger gang, with the
gang's own hold given back), the gang grows:

1. its attempt keeps the larger hold at once (so no other step takes the freed room while
   it stops), and the run's events say ``gang X grows from 2 to 4 replicas (CPUs freed)``;
2. its replicas are stopped (SIGTERM, then the step's ``stop_grace``; on a thread, so the
   runner goes on polling meanwhile);
3. when the engine reports the gang over, ``Attempts.settle`` requeues it (``resized: ...``,
   outside the retry budget, as a node fault is) and ``turn`` hands it back to the runner,
   which starts the next attempt with as many replicas as fit (``LocalDispatch.decide``) and
   ``TORCHELASTIC_RESTART_COUNT`` one higher.

The growth is recorded (the attempt's message, ``resized: ...``) before the replicas are
stopped, so an executor killed meanwhile is repaired on resume: ``lifecycle.reconcile`` settles
the attempt as a growth too (requeued, not a failure) and the next attempt starts with what
fits.  Cluster backends do not grow gangs (they run them at ``max``).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable

from hetflow.errors import HetflowError
from hetflow.execute.backends.base import Backend
from hetflow.execute.gang.elastic import RESIZED, Need, freed_kind, grow_note, grow_to, with_replicas
from hetflow.execute.run.attempts import Active, Attempts
from hetflow.execute.run.dispatching.dispatch import Dispatch, LocalDispatch, tenant
from hetflow.execute.run.retries import adjusted
from hetflow.plan import Capacity
from hetflow.spec import DEFAULT_STOP_GRACE, Step
from hetflow.state import Note


class ElasticGangs:
    """Grows this run's elastic gangs (see the module's docstring)."""

    def __init__(
        self, *, dispatch: Dispatch, attempts: Attempts, backend: Backend, clock: Callable[[], float], every: float
    ) -> None:
        self.dispatch, self.attempts, self.backend, self.clock, self.every = dispatch, attempts, backend, clock, every
        self.seen: dict[str, float] = {}  # container -> when this executor first saw it in flight
        self.resizing: set[str] = set()  # steps whose gang is stopping to grow
        self.stops: list[threading.Thread] = []

    def turn(self) -> list[str]:
        """Grow what can grow now; return the steps whose gang has stopped to grow (requeued:
        the runner starts them again at once, before other steps take the room)."""
        if not isinstance(self.dispatch, LocalDispatch):
            return []
        again = sorted(s for s in self.resizing if s not in self.attempts.active)
        self.resizing -= set(again)
        now = self.clock()
        for act in list(self.attempts.active.values()):
            step = self.attempts.wf.steps.get(act.step)
            if step is None or step.gang is None or step.gang.elastic is None:
                continue
            if act.resize:  # growing: stopped by this executor, or adopted mid-growth by resume (stopped again)
                if act.step not in self.resizing:
                    self._stop(act, step)
                continue
            since = now - self.seen.setdefault(act.container, now)
            target = self._target(act, step, self.dispatch, since)
            if target > act.replicas:
                self._grow(act, step, target)
        self.stops = [t for t in self.stops if t.is_alive()]
        flight = {a.container for a in self.attempts.active.values()}
        self.seen = {c: t for c, t in self.seen.items() if c in flight}
        return again

    def _target(self, act: Active, step: Step, dispatch: LocalDispatch, since: float) -> int:
        """The size the gang can grow to now (``act.replicas``: not now)."""
        assert step.gang is not None and step.gang.elastic is not None
        if act.replicas >= step.gang.elastic.max or since < self.every:
            return act.replicas  # no store or engine read each turn for a gang that cannot grow now
        n = max(1, act.replicas)
        per = Need(act.cpus / n, act.memory // n, len(act.gpus) // n)
        live = dispatch.live_leases()
        free = dispatch.free(live)
        now = Need(free.cpus, free.memory, len(free.gpus))
        target = grow_to(act.replicas, step.gang.elastic.max, per, now, since=since, every=self.every)
        if target <= act.replicas:
            return act.replicas
        # the chooser decides as for a start: the larger gang, in what is free plus what the gang holds
        own = tuple(g for g in dispatch.node.gpus if g.uuid in act.gpus)
        room = Capacity(free.cpus + act.cpus, free.memory + act.memory, (*free.gpus, *own))
        others = tuple(tenant(lease) for lease in live if lease.container != act.container)
        larger = with_replicas(adjusted(step, self.attempts.next.get(act.step)), target)
        choice = dispatch.chooser.choose(larger, dispatch.node, room, act.step, others)
        return target if choice.variant is not None else act.replicas

    def _grow(self, act: Active, step: Step, target: int) -> None:
        """Hold the room for ``target`` replicas, say so, and stop the gang's replicas."""
        n = act.replicas
        per = Need(act.cpus / n, act.memory // n, len(act.gpus) // n)
        note = grow_note(act.step, n, target, freed_kind(per))
        act.resize = RESIZED + note
        act.cpus, act.memory = per.cpus * target, per.memory * target
        run_id, store = self.attempts.run_id, self.attempts.store
        self.attempts.emit(Note(0, run_id, self.clock(), note, act.step, "elastic"))
        # the intent first: an executor killed from here on finds it on resume (``lifecycle.reconcile``)
        store.set_attempt(run_id, act.step, act.attempt, message=act.resize)
        store.set_step(run_id, act.step, reason=f"{note}: stopping its replicas")
        self._stop(act, step)

    def _stop(self, act: Active, step: Step) -> None:
        """Stop the gang's replicas (SIGTERM, then ``stop_grace``) on a thread of its own."""
        self.resizing.add(act.step)
        grace = math.ceil(step.stop_grace if step.stop_grace is not None else DEFAULT_STOP_GRACE)
        stop = threading.Thread(target=self._cancel, args=(act.container, grace), name=f"grow-{act.step}", daemon=True)
        stop.start()
        self.stops.append(stop)

    def _cancel(self, container: str, grace: int) -> None:
        # a stop that fails leaves the gang running: it ends as it would have (settled as usual)
        with contextlib.suppress(HetflowError):
            self.backend.cancel([container], grace)

    def close(self) -> None:
        """Wait for the stops in progress (the executor ends after them)."""
        for t in self.stops:
            t.join()
        self.stops = []
