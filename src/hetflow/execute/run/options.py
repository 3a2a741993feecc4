"""What a Runner is given beside its run: what the stored plan says to follow
(``RunOptions``), the process it runs in (``ProcessSeams``: clock, sleep, pid, liveness,
which unit tests replace), where it reports (``Reporter``), and the dispatch strategy it
follows (``make_dispatch``: the cluster plan's placements, or this machine's capacity).

Grouped here so that ``Runner`` takes a few named records instead of seventeen keywords,
and so that each caller (the session, the unit tests' builders) says only what differs."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hetflow.execute.backends.base import Backend
from hetflow.execute.data.cache import ResultCache
from hetflow.execute.data.inputs import DataManifest
from hetflow.execute.run.attempts import Attempts
from hetflow.execute.run.control.lifecycle import pid_alive
from hetflow.execute.run.dispatching.dispatch import ClusterDispatch, Dispatch, LocalDispatch
from hetflow.execute.settings import RunnerConfig
from hetflow.inventory import Node
from hetflow.plan import GreedyChooser, MachineClass, Placement, PlanChooser, VariantChooser
from hetflow.state import RunRecord, StepRecord, Store

__all__ = ["NullReporter", "ProcessSeams", "Reporter", "RunOptions", "make_dispatch"]


class Reporter(Protocol):
    def update(self, run: RunRecord, steps: list[StepRecord]) -> None: ...

    def close(self) -> None: ...


class NullReporter:
    def update(self, run: RunRecord, steps: list[StepRecord]) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class RunOptions:
    """What the run follows.  Local runs give a ``chooser`` (the plan's variants); cluster
    runs the plan's ``placements`` on its machine ``classes``.  ``priority``: ready steps are
    dispatched in this order (the plan's start times: its ranks, not its clock), else in file
    order.  ``grace``: the seconds each container has to save its work when a signal stops
    the run (None: the engine's default)."""

    chooser: VariantChooser | None = None
    reporter: Reporter | None = None
    config: RunnerConfig | None = None
    priority: Mapping[str, float] | None = None
    placements: Mapping[str, Placement] | None = None
    classes: Sequence[MachineClass] = ()
    data: DataManifest | None = None
    cache: ResultCache | None = None
    grace: int | None = None


@dataclass(frozen=True)
class ProcessSeams:
    """The process a runner runs in: its clock, how it sleeps (None: on its wake event), its
    pid (None: this process's) and how it tells whether another executor's pid lives."""

    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] | None = None
    pid: int | None = None
    alive: Callable[[int], bool] = field(default=pid_alive)

    def own_pid(self) -> int:
        return self.pid if self.pid is not None else os.getpid()


def make_dispatch(
    store: Store, node: Node, backend: Backend, attempts: Attempts, options: RunOptions, seams: ProcessSeams
) -> Dispatch:
    """An engine whose nodes run the steps (``Capabilities.places_steps``) follows the
    cluster plan's placements; this machine's capacity and GPU leases are hetflow's own concern."""
    if backend.capabilities.places_steps:
        chooser = options.chooser
        return ClusterDispatch(
            node,
            options.placements or {},
            options.classes,
            attempts.next,
            # the plan's reasons (--variant/--prefer) ride on the chooser the session built from it
            reasons=chooser.reasons if isinstance(chooser, PlanChooser) else None,
            failed=attempts.lost.nodes,  # the run's failed nodes, as they are declared
        )
    return LocalDispatch(
        node=node,
        chooser=options.chooser or GreedyChooser(),
        store=store,
        backend=backend,
        active=attempts.active,
        pid=seams.own_pid(),
        alive=seams.alive,
    )
