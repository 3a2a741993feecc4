"""Ray: each step attempt is a Ray task that runs the step's container on the node Ray
chose, with podman in the foreground, and returns its exit code.

Adoption.  A Ray task belongs to the process that submitted it and dies with it (Ray's
ownership model: a task and its result share the fate of their owner; Ray docs, "Fault
tolerance").  A hetflow executor may crash, so it never owns a step's task: one
DETACHED named actor per run (namespace ``hetflow``, name ``run-RUN``) submits the run's
tasks, owns them and answers for them by name.  A resumed executor or ``hetflow stop`` is
another driver; it finds the actor with ``ray.get_actor``, and the jobs go on running
while no driver is connected.  One actor per run, not per step: each actor is a Python
worker process of its own, and a run may have hundreds of steps.  The actor uses no
CPU (``num_cpus=0``), lives on the head node (``node:__internal_head__``, Ray's way of
placing on the head), forgets a job on ``release`` and ends itself after
``idle_timeout`` seconds with nothing to answer for.  Its state is in its memory: if the
head node dies, so do the run's jobs (as everything else on a Ray cluster does).

GPU isolation.  Ray assigns GPUs (``num_gpus``) and tells the task which
(``ray.get_gpu_ids()``); the task passes exactly those device nodes (plus nvidiactl and
the other control nodes present) to podman, numbered 0..n-1 inside through
NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES, as ``execute/devices/gpu.py`` does on one machine.
The device nodes are read from ``device_dir`` on the node (``/dev``; a folder of mknod'd
fake nodes in tests, where ``{node}`` stands for the node's hetflow name).

Gangs.  A gang job (``Job.gang``, ``Job.ranks``) is one placement group of one bundle per
replica, made and owned by the run's keeper like its tasks (``gangs``: bundles and
strategy; ``gangrun``: the rest).  No replica starts before Ray has reserved every bundle;
then each replica is a task pinned to its bundle, given the launch contract computed from
the bundles' nodes and the GPUs Ray assigned it.  ``poll`` reports the gang under the job's
one name; ``cancel`` stops every replica; ``release`` removes the group.  A gang the alive
nodes could never hold is refused by ``submit``; one that waits is PENDING with Ray's reason.

Checkpoints (``checkpoint:``, CRIU).  ``checkpoint`` dumps a step's container with a task
pinned to the node its task runs on (the keeper knows the node), to the run's shared
workdir; a job with ``Job.restore`` is restored by its own task on whatever node Ray gives
it, or run from zero when that fails (``restore``).  A dump that stops the container ends
its task too: the keeper reports that end as CHECKPOINTED, not as the step's failure.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hetflow.config import engine_env
from hetflow.errors import EngineError
from hetflow.execute.backends.base import Job, JobState
from hetflow.execute.backends.common import host_image_id
from hetflow.execute.backends.plugin import RunSettings
from hetflow.execute.backends.ray.container import probe_node, ray_nodes
from hetflow.execute.backends.ray.gangs import gang_request
from hetflow.execute.backends.ray.keeper import KeeperActor
from hetflow.execute.backends.ray.plugin import PLUGIN
from hetflow.execute.backends.ray.restore import DUMP_TIMEOUT, dump_task
from hetflow.execute.backends.ray.settings import RaySettings
from hetflow.execute.backends.ray.translate import MARKER, RayNode, node_name, task_request, with_vendor
from hetflow.execute.engine import ContainerEngine, Usage

HEAD_RESOURCE = "node:__internal_head__"
STOP_MARGIN = 60.0  # seconds past the grace that ``cancel`` waits, at most, for the jobs to end


def _listening(address: str, timeout: float = 5.0) -> None:
    """ConnectionError when nothing listens at the address: ray.init would retry the
    head's GCS for a minute or more (gcs_rpc_server_reconnect_timeout_s) before failing."""
    target = address.removeprefix("ray://")
    if address == "auto":
        try:  # the address `ray start` recorded (/tmp/ray/ray_current_cluster); private API
            from ray._private.services import canonicalize_bootstrap_address_or_die

            target = canonicalize_bootstrap_address_or_die("auto")
        except ConnectionError:
            raise
        except Exception:
            return  # the private helper changed: let ray.init decide
    host, _, port = target.rpartition(":")
    if not port.isdigit():
        return  # ray://HOST: Ray's default client port; ray.init reports it
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout).close()
    except OSError as exc:
        raise ConnectionError(f"nothing answers at {target} ({exc.strerror or exc})") from None


# --- the backend --------------------------------------------------------------------------


class RayBackend:
    capabilities = PLUGIN.capabilities

    @classmethod
    def from_settings(cls, settings: RunSettings, engine: ContainerEngine | None) -> RayBackend:
        """The ``ray:`` section; the nodes run their own podman (``engine`` is this machine's)."""
        return cls(RaySettings.from_backend(settings))

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """None: the image is run on the nodes, whose engine is not asked here."""
        return None

    def __init__(self, settings: RaySettings | None = None) -> None:
        self.settings = settings or RaySettings()
        self._keepers: dict[str, Any] = {}
        self._nodes: tuple[float, list[RayNode]] = (0.0, [])
        self._images: set[str] = set()

    # connection

    def _connect(self) -> None:
        if ray.is_initialized():
            return  # one Ray connection per process; reuse the caller's
        s = self.settings
        # "local": a new Ray in this process even where `ray start` left an address file,
        # which ray.init() with no address would connect to.
        address = s.address or os.environ.get("RAY_ADDRESS") or ("local" if s.start_local else "auto")
        kw: dict[str, Any] = {"namespace": s.namespace, "log_to_driver": False, "logging_level": logging.WARNING}
        if address == "local":
            kw |= {"num_cpus": s.num_cpus, "num_gpus": s.num_gpus, "resources": dict(s.resources) or None}
            kw["include_dashboard"] = False
        try:
            if address != "local":
                _listening(address)
            _init(address, kw)
        except (ConnectionError, RuntimeError, ValueError, TimeoutError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EngineError(
                f"cannot reach the Ray cluster at {address}: {first}; start one with `ray start --head` "
                "(and `ray start --address HEAD:6379` on the other nodes), set ray.address in hetflow's "
                "config (auto, HOST:6379 or ray://HOST:10001), or set ray.start_local: true"
            ) from None

    def check(self) -> None:
        """Ray reachable, and podman on every node."""
        self._connect()
        nodes = self.nodes(refresh=True)
        if not nodes:
            raise EngineError("the Ray cluster has no alive node; start one with `ray start`")
        missing = [name for name, found, _ in self._probe_nodes(nodes, None) if not found]
        if missing:
            raise EngineError(f"podman is missing on Ray node(s) {', '.join(missing)}: apt-get install -y podman runc")

    def nodes(self, *, refresh: bool = False, ttl: float = 5.0) -> list[RayNode]:
        """Alive nodes, cached for ``ttl`` seconds (submitting 100 steps asks once)."""
        at, cached = self._nodes
        if refresh or not cached or time.monotonic() - at > ttl:
            cached = [
                RayNode(n["NodeID"], node_name(n.get("Labels") or {}, n["Resources"], n["NodeID"]), n["Resources"])
                for n in ray_nodes()
                if n.get("Alive")
            ]
            self._nodes = (time.monotonic(), cached)
        return cached

    def _probe_nodes(self, nodes: Sequence[RayNode], image: str | None) -> list[tuple[str, bool, bool]]:
        refs = [
            probe_node.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)).remote(image)
            for n in nodes
        ]
        try:
            return list(ray.get(refs, timeout=120))
        except RayError as exc:
            raise EngineError(f"Ray could not run a probe on every node: {exc}") from None

    def image_exists(self, image: str) -> bool:
        """Present on every alive node (each pulls nothing: ``--pull never``)."""
        if image in self._images:
            return True
        self._connect()
        if all(present for _, _, present in self._probe_nodes(self.nodes(refresh=True), image)):
            self._images.add(image)
            return True
        return False

    def image_id(self, image: str) -> str | None:
        """Asked of this machine's podman (``common.host_image_id``, as Slurm does)."""
        return host_image_id(image, engine_env())

    # the run's keeper

    def _actor_name(self, run_id: str) -> str:
        return f"run-{run_id}"

    def _keeper(self, run_id: str) -> Any | None:
        """The run's actor, if it exists (an earlier process may have made it)."""
        if run_id not in self._keepers:
            try:
                self._keepers[run_id] = ray.get_actor(self._actor_name(run_id), namespace=self.settings.namespace)
            except ValueError:
                return None
        return self._keepers[run_id]

    def _new_keeper(self, run_id: str) -> Any:
        if run_id not in self._keepers:
            self._keepers[run_id] = KeeperActor.options(
                name=self._actor_name(run_id),
                namespace=self.settings.namespace,
                lifetime="detached",
                get_if_exists=True,
                resources={HEAD_RESOURCE: MARKER},
            ).remote(run_id, self.settings.idle_timeout)
        return self._keepers[run_id]

    def _keepers_for(self, names: Iterable[str]) -> dict[str, list[str]]:
        """Job names by run id, from the names of the run actors alive now (a job is named
        hf-RUN-STEP-ATTEMPT; the longest run id that prefixes the name wins)."""
        runs = [
            a["name"][len("run-") :]
            for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == self.settings.namespace and a["name"].startswith("run-")
        ]
        runs.sort(key=len, reverse=True)
        out: dict[str, list[str]] = {}
        for name in names:
            run = next((r for r in runs if name.startswith(f"hf-{r}-")), None)
            if run is not None:
                out.setdefault(run, []).append(name)
        return out

    def _call(self, run_id: str, method: str, *args: Any) -> Any:
        keeper = self._keeper(run_id)
        if keeper is None:
            return None
        try:
            return ray.get(getattr(keeper, method).remote(*args), timeout=120)
        except RayActorError:
            self._keepers.pop(run_id, None)  # it ended (idle, or its node died)
            return None

    # the contract

    def submit(self, job: Job) -> None:
        """One task for a step; for a gang (``job.gang``) one placement group whose replicas
        start once Ray has reserved all of them (``gangrun``)."""
        self._connect()
        s = self.settings
        grace = s.stop_timeout if job.container.stop_grace is None else job.container.stop_grace  # step's stop_grace
        if job.gang is not None and job.ranks:
            gang = gang_request(job, self.nodes())
            ranks = tuple(with_vendor(replace(job, container=r)) for r in job.ranks)  # AMD/Intel: render nodes
            call: tuple[Any, ...] = ("submit_gang", job.name, ranks, job.gang, gang, s.device_dir, grace)
        else:
            req = task_request(job, self.nodes())
            migs = s.mig_devices if job.gpu_request is not None and job.gpu_request.kind == "mig" else {}
            call = ("submit", job.name, with_vendor(job), req, s.device_dir, grace, dict(migs), job.restore)
        for _ in range(2):  # the run's actor may have just ended for idleness: make a new one
            keeper = self._new_keeper(job.run_id)
            try:
                ray.get(getattr(keeper, call[0]).remote(*call[1:]), timeout=120)
                return
            except RayActorError:
                self._keepers.pop(job.run_id, None)
            except RayTaskError as exc:
                raise EngineError(f"Ray refused {job.name}: {exc.cause if exc.cause else exc}") from None
        raise EngineError(f"Ray could not keep an actor alive for run {job.run_id}; see `ray status`")

    def checkpoint(
        self, name: str, dest: Path, *, leave_running: bool, outputs: tuple[Path, Path] | None = None
    ) -> float:
        """Dump job ``name``'s container to ``dest`` (the run's shared workdir) with a task
        pinned to the node its task runs on (``restore.dump_task``); the seconds it took.
        Without ``leave_running`` the dump stops the container: the keeper holds the task's
        end back until the dump's outcome is known, then reports it CHECKPOINTED, not failed."""
        self._connect()
        run_id = next(iter(self._keepers_for([name])), None)
        where = self._call(run_id, "dump_target", name, not leave_running) if run_id else None
        if where is None:
            raise EngineError(f"{name} is not running on Ray: there is nothing to checkpoint")
        node_id, node = where
        ok, took, said = False, 0.0, ""
        try:
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
            copy = (str(outputs[0]), str(outputs[1])) if outputs else None
            ref = dump_task.options(scheduling_strategy=strategy).remote(name, str(dest), leave_running, copy)
            ok, took, said = ray.get(ref, timeout=DUMP_TIMEOUT + 60)
        except RayError as exc:  # the node went, or the dump outlived its limit
            text = str(exc).strip().splitlines()
            said = f"{type(exc).__name__}: {text[0] if text else ''}"
        finally:
            if not leave_running and run_id:
                self._call(run_id, "dump_ended", name, ok)
        if not ok:
            raise EngineError(f"checkpoint of {name} on Ray node {node} failed: {said}")
        return float(took)

    def poll(self, run_id: str) -> dict[str, JobState]:
        self._connect()
        states = self._call(run_id, "states")
        return dict(states) if states else {}

    def cancel(self, names: Iterable[str], grace: int | None = None) -> None:
        """Stop the jobs and wait (a bounded while) for them to end, as ``podman stop``
        does for the local backend, so that a poll right after sees their exit codes.
        ``grace`` is not passed on: each task stops its container with the stop timeout
        it was submitted with (the step's ``stop_grace``, else ``RaySettings.stop_timeout``);
        it only makes the wait longer.  The wait ends when they have ended; its bound leaves a
        minute over the grace (15 s can be exceeded on a loaded machine, where podman stop may wait
        for podman's lock: the stop then returned while the step was still saving on SIGTERM)."""
        self._connect()
        groups = self._keepers_for(names)
        for run_id, group in groups.items():
            self._call(run_id, "cancel", group)
        deadline = time.monotonic() + max(self.settings.stop_timeout, grace or 0) + STOP_MARGIN
        for run_id, group in groups.items():
            while time.monotonic() < deadline:
                states = self._call(run_id, "states") or {}
                if not any(states[n].running for n in group if n in states):
                    break
                time.sleep(0.2)

    def release(self, names: Iterable[str]) -> None:
        self._connect()
        for run_id, group in self._keepers_for(names).items():
            self._call(run_id, "release", group)

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None  # the runner polls; one actor call per poll answers for the whole run

    def usage(self, name: str) -> Usage:
        """What the job's container used, as its task measured it on its node (``container``)."""
        self._connect()
        for run_id, _ in self._keepers_for([name]).items():
            found = self._call(run_id, "usage", name)
            if isinstance(found, Usage):
                return found
        return Usage()


def _init(address: str, kw: dict[str, Any], attempts: int = 3) -> None:
    """``ray.init``; a Ray client server (``ray://``) that is up but still starting its
    per-client worker answers "Initialization failure from server", so that is retried a
    few times with a short backoff before it counts as unreachable."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, **kw)
            return
        except ConnectionError as exc:
            if not address.startswith("ray://") or "Initialization failure" not in str(exc) or attempt == attempts:
                raise
            time.sleep(attempt)
