"""This machine: each job is a podman (or docker) container; hetflow leases the GPUs.

A gang job (``Job.ranks``) is its replicas' containers on one private network of their own
(``--internal`` unless the step asked for the network), started together: if one cannot
start, the ones started are removed and the job is refused.  ``poll`` reports the gang as
the job's one name (``execute.gang.replicas.gang_state``) and stops the other replicas as soon as
one fails, so a gang fails (and is retried) whole."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job, JobState, MeasuresUsage
from hetflow.execute.backends.local.criupodman import CriuPodman
from hetflow.execute.backends.local.engines import make_engine
from hetflow.execute.backends.local.plugin import PLUGIN
from hetflow.execute.backends.local.podman import CliEngine
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.engine import NEVER_STARTED, UNKNOWN, ContainerEngine, Networks, Usage
from hetflow.execute.gang.replicas import (
    LABEL_LAUNCHER,
    LABEL_WORLD,
    gang_state,
    network_name,
    replica_name,
    replica_of,
)
from hetflow.kube import LABEL_RUN


class LocalBackend:
    capabilities = PLUGIN.capabilities

    @classmethod
    def from_settings(cls, settings: RunSettings, engine: ContainerEngine | None) -> LocalBackend:
        """The run's container engine here (None: this machine's podman or docker); no section."""
        return cls(engine)

    def __init__(self, engine: ContainerEngine | None = None, env: Mapping[str, str] | None = None) -> None:
        self.engine: ContainerEngine = engine or make_engine(env)

    def check(self) -> None:
        pass  # make_engine already said what to install when no engine is found

    def image_exists(self, image: str) -> bool:
        return self.engine.image_exists(image)

    def image_id(self, image: str) -> str | None:
        lookup = getattr(self.engine, "image_id", None)  # engines made for tests may not say
        return lookup(image) if lookup is not None else None

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """The image's ENTRYPOINT, () for none; None where the engine cannot say."""
        lookup = getattr(self.engine, "image_entrypoint", None)
        return lookup(image) if lookup is not None else None

    def submit(self, job: Job) -> None:
        if job.restore is not None and isinstance(self.engine, CliEngine) and not job.ranks:
            CriuPodman(self.engine).restore(job.restore, job.container)
            return
        if not job.ranks:
            self.engine.start(job.container)
            return
        if not isinstance(self.engine, Networks):
            raise EngineError(f"the {self.engine.name} engine cannot make networks, so it cannot run gang steps")
        net = job.ranks[0].network_name or network_name(job.name)
        self.engine.create_network(net, internal=not job.container.network, labels={LABEL_RUN: job.run_id})
        started: list[str] = []
        try:
            for spec in job.ranks:
                self.engine.start(spec)
                started.append(spec.name)
        except EngineError:
            self.engine.remove(started)
            self.engine.remove_network(net)
            raise

    def checkpoint(
        self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
    ) -> float:
        if not isinstance(self.engine, CliEngine):
            raise EngineError(f"the {self.engine.name} engine cannot checkpoint containers")
        return CriuPodman(self.engine).dump(name, dest, leave_running=leave_running, outputs=outputs)

    def poll(self, run_id: str) -> dict[str, JobState]:
        states = self.engine.states(run_id)
        out: dict[str, JobState] = {}
        gangs: dict[str, dict[int, tuple[bool, int | None, str]]] = {}
        for name, st in states.items():
            rep = replica_of(name)
            if rep is not None:
                gangs.setdefault(rep[0], {})[rep[1]] = (st.running, st.exit_code, st.status)
            else:
                new = st.status == NEVER_STARTED  # made, then its `podman run` was killed before it started it
                why = f"{NEVER_STARTED}: its {self.engine.name} run was killed before starting it" if new else st.reason
                out[name] = JobState(name, st.running, st.exit_code, st.status, reason=why, never_started=new)
                if st.labels.get(LABEL_WORLD, "1") not in ("", "1"):
                    gangs.setdefault(name, {})  # a gang's replica 0 alone is a gang with replicas missing
        for job, replicas in gangs.items():
            lead = out.get(job)
            if lead is not None:
                replicas[0] = (lead.running, lead.exit_code, lead.status)
            mine = [st for n, st in states.items() if n == job or (replica_of(n) or ("", 0))[0] == job]
            sizes = [st.labels.get(LABEL_WORLD, "") for st in mine]
            world = max([max(replicas) + 1, *(int(x) for x in sizes if x.isdigit())])
            decides = job in states and states[job].labels.get(LABEL_LAUNCHER) == "mpi"
            g = gang_state(replicas, world, lead=decides)
            if not g.running and any(r[0] for r in replicas.values()):
                # one replica failed: the others are stopped, and the gang is reported when
                # they have gone (no replica keeps its GPUs after the gang failed)
                self.engine.stop([replica_name(job, r) for r, st in replicas.items() if st[0]], timeout=5)
                out[job] = JobState(job, True, None, f"stopping: {g.status}")
                continue
            reason = f"replica {g.failed_rank} failed ({g.status})" if g.failed_rank is not None else ""
            out[job] = JobState(job, g.running, g.exit_code, g.status, reason=reason)
        return out

    def _replicas(self, names: Iterable[str]) -> list[str]:
        """The names and every replica of them that the engine has."""
        wanted = set(names)
        if not wanted:
            return []
        extra: list[str] = []
        for run_id in {_run_of(n) for n in wanted}:
            extra += [n for n in self.engine.states(run_id) if (rep := replica_of(n)) is not None and rep[0] in wanted]
        return [*wanted, *extra]

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        # podman stop --time N: SIGTERM, then SIGKILL after N s (podman-stop(1))
        self.engine.stop(self._replicas(names), *([] if grace is None else [grace]))

    def signal(self, names: Iterable[str], sig: str) -> None:
        """``podman kill --signal SIG`` to the containers and every replica of them (podman-kill(1);
        ``appcheckpoint.SaveRequests``: SIGUSR1, "save now").  Best effort: a container that
        ended meanwhile is skipped (podman says so; not an error).  An engine without a CLI
        (a test's fake) is not signalled."""
        wanted = self._replicas(names)
        if not isinstance(self.engine, CliEngine) or not wanted:
            return
        with contextlib.suppress(EngineError):  # it did not answer: the next request, or the stop, follows
            self.engine.command(["kill", "--signal", sig, *wanted], timeout=60, env={})

    def release(self, names: Iterable[str]) -> None:
        self.release_measured(names, (), None)

    def release_measured(
        self, names: Iterable[str], measure: Collection[str], measured: Callable[[str, Usage], None] | None
    ) -> None:
        """Remove the containers (every replica of a gang) and gang networks; podman reads
        what each of ``measure`` used first, in the background while a run is watched."""
        names = list(names)
        everything = self._replicas(names)
        if isinstance(self.engine, CliEngine):
            self.engine.remove(everything, measure=measure, measured=measured)
        else:
            for n in measure:
                if measured is not None:
                    measured(n, self.usage(n))
            self.engine.remove(everything)
        gangs = {rep[0] for x in everything if (rep := replica_of(x)) is not None}
        if isinstance(self.engine, Networks):
            for n in sorted(gangs):
                self.engine.remove_network(network_name(n))

    def drop_networks(self, run_id: str, keep: Collection[str]) -> list[str]:
        """The run's gang networks whose attempt is over: the last executor removes a gang's
        containers, then its network, in the background, so a kill -9 between the two leaves
        the network with no container for ``release`` to find (the rule is doctor's: a
        network is kept while its gang's attempt is in flight)."""
        if not isinstance(self.engine, Networks):
            return []
        wanted = {network_name(c) for c in keep}
        stale = sorted(n for n, r in self.engine.run_networks().items() if r == run_id and n not in wanted)
        for net in stale:
            self.engine.remove_network(net)
        return stale

    def settle_launches(self, names: Collection[str]) -> list[str]:
        """A killed executor's ``podman run``s of ``names`` still creating their containers
        (``execute.orphans``); an engine without a CLI (a test's own) has none."""
        return self.engine.settle_launches(names) if isinstance(self.engine, CliEngine) else []

    def usage(self, name: str) -> Usage:
        """What the engine measured (podman: the attempt's cgroup); an engine that cannot
        measure (a test's own engine) leaves it unknown.  A gang's is its replica 0's."""
        return self.engine.usage(name) if isinstance(self.engine, MeasuresUsage) else UNKNOWN

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return self.engine.watch(run_id, wake)

    def watch_new(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        """``watch`` of a run that has launched nothing: podman is not asked for its containers."""
        if isinstance(self.engine, CliEngine):
            return self.engine.watch(run_id, wake, new=True)
        return self.engine.watch(run_id, wake)

    def pull(self, ref: str, *, insecure: bool = False) -> None:
        if isinstance(self.engine, CliEngine):
            self.engine.pull(ref, insecure=insecure)


def _run_of(name: str) -> str:
    """``hf-RUN-STEP-ATTEMPT`` -> RUN (run ids have no dashes)."""
    return name.split("-", 2)[1] if name.startswith("hf-") else ""
