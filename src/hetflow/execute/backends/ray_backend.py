"""Ray: each step attempt is a Ray task that runs the step's container on the node Ray
chose, with podman in the foreground, and returns its exit code.

The module is ``ray_backend``, not ``ray``: a file named ray.py would be found instead of
the ``ray`` package wherever its folder is on ``sys.path`` (a worker started there, a
script run from it).

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
NVIDIA_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES, as ``execute/gpu.py`` does on one machine.
The device nodes are read from ``device_dir`` on the node (``/dev``; a folder of mknod'd
fake nodes in tests, where ``{node}`` stands for the node's hetflow name).
"""

from __future__ import annotations

import logging
import os
import re
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import ray
import yaml
from ray.exceptions import RayActorError, RayError, RayTaskError, TaskCancelledError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from hetflow.config import SHARE, engine_env
from hetflow.errors import EngineError, UsageError
from hetflow.execute.backends.base import Capabilities, Job, JobState
from hetflow.execute.engine import ContainerSpec, run_args
from hetflow.execute.gpu import DRIVER_DIR, cdi_device_names, driver_mounts
from hetflow.execute.settings import Settings

NAMESPACE = "hetflow"
# Where a node says which hetflow node it is: a label (``ray start --labels
# hetflow/node=gpu-1``) or a custom resource (``--resources '{"hetflow_node:gpu-1": 1}'``).
NODE_LABEL = "hetflow/node"
NODE_RESOURCE = "hetflow_node:"
NODE_TYPE_RESOURCE = "hetflow/node-type:"  # a cluster file's node type, e.g. hetflow/node-type:gpu.a100
ACCELERATOR_RESOURCE = "accelerator_type:"  # Ray's own: set by Ray on nodes with NVIDIA GPUs
HEAD_RESOURCE = "node:__internal_head__"
# A custom resource asked for as a marker, not a quantity: 1000 jobs fit on a node with 1.
MARKER = 0.001
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
CANCELLED_CODE = 137  # what `podman stop` gives a container that ignores SIGTERM


# --- settings ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RaySettings:
    """``address``: "auto", "HOST:PORT" (the head's GCS) or "ray://HOST:10001" (Ray
    Client); None: RAY_ADDRESS, else a local cluster when ``start_local``, else "auto".
    ``start_local`` starts Ray inside this process (``num_cpus``, ``num_gpus``,
    ``resources`` as for ``ray.init``); it ends with the process, so its jobs cannot be
    adopted after a crash: run ``ray start --head`` for that."""

    address: str | None = None
    namespace: str = NAMESPACE
    start_local: bool = False
    num_cpus: int | None = None
    num_gpus: int | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    device_dir: str = "/dev"
    stop_timeout: int = 10  # seconds between SIGTERM and SIGKILL on cancel (podman stop -t)
    idle_timeout: float = 300.0  # a run's actor ends after this long with no job to answer for

    @classmethod
    def from_backend(cls, settings: Settings) -> RaySettings:
        return cls.from_mapping(settings.ray, engine=settings.engine)

    @classmethod
    def from_mapping(cls, m: Mapping[str, str], *, engine: str = "podman") -> RaySettings:
        """From the ``ray:`` section of hetflow's settings, whose values are strings (as
        config files and HETFLOW_* variables give them; ``resources`` is a YAML or JSON
        mapping).  ``engine``: the container engine on the nodes; podman only, since a
        foreground ``docker run --rm`` would take the step's log with it."""
        if Path(engine).name != "podman":
            raise UsageError(f"the Ray backend runs steps with podman on each node; engine {engine!r} is not supported")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(m) - known)
        if unknown:
            raise UsageError(f"ray settings: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        kw: dict[str, Any] = {}
        for key, raw in m.items():
            text = str(raw).strip()
            try:
                kw[key] = _setting(key, text)
            except (ValueError, AttributeError, yaml.YAMLError) as exc:
                raise UsageError(
                    f"ray settings: {key}={raw!r} is not valid ({exc}); "
                    'e.g. num_cpus: 8, resources: {"accelerator_type:A100": 4}'
                ) from None
        return cls(**kw)


def _setting(key: str, text: str) -> Any:
    if key == "start_local":
        return text.lower() in ("1", "true", "yes", "on")
    if key in ("num_cpus", "num_gpus", "stop_timeout"):
        return int(text)
    if key == "idle_timeout":
        return float(text)
    if key == "resources":
        return {str(k): float(v) for k, v in (yaml.safe_load(text) or {}).items()}
    if key == "address":
        return text or None
    return text


# --- what a job asks Ray for (pure) -----------------------------------------------------


@dataclass(frozen=True)
class RayNode:
    """One alive Ray node as hetflow sees it."""

    node_id: str
    name: str
    resources: Mapping[str, float]  # totals


@dataclass(frozen=True)
class TaskRequest:
    """The Ray task options for one job (``.options(...)`` of the step task)."""

    num_cpus: float
    num_gpus: int
    memory: int
    resources: Mapping[str, float]
    node_id: str | None = None  # NodeAffinitySchedulingStrategy(node_id, soft=False)

    def describe(self) -> str:
        parts = [f"{self.num_cpus:g} CPU"] + ([f"{self.num_gpus} GPU"] if self.num_gpus else [])
        parts += sorted(self.resources) + ([f"node {self.node_id[:12]}"] if self.node_id else [])
        return ", ".join(parts)


# Ray's own rule for naming an NVIDIA model (ray/_private/accelerators/nvidia_gpu.py,
# NVIDIA_GPU_NAME_PATTERN): "NVIDIA A100-SXM4-40GB" -> A100, "Tesla T4" -> T4.
_RAY_GPU_NAME = re.compile(r"\w+\s+((?:[A-Z]+\s+)*[A-Z0-9]*\d[A-Z0-9]*)")


def accelerator_type(model: str) -> str:
    """The ``accelerator_type:`` Ray gives a node with this GPU model; a bare model name
    ("a100", as a cluster file may write it) is taken as is, upper-cased."""
    model = model.strip()
    m = _RAY_GPU_NAME.match(model)
    if m and len(m.group(1)) > 1:
        return m.group(1).replace(" ", "-")
    if " " not in model:
        return model.split("-")[0].upper()
    return re.sub(r"^NVIDIA\s+", "", model).replace(" ", "-")


def node_name(labels: Mapping[str, str], resources: Mapping[str, float], node_id: str) -> str:
    """A node's hetflow name: its ``hetflow/node`` label, else its ``hetflow_node:NAME``
    resource, else its Ray node id."""
    if labels.get(NODE_LABEL):
        return labels[NODE_LABEL]
    for key in resources:
        if key.startswith(NODE_RESOURCE):
            return key[len(NODE_RESOURCE) :]
    return node_id


def task_request(job: Job, nodes: Sequence[RayNode]) -> TaskRequest:
    """What to ask Ray for; EngineError saying what to change when no node of the
    cluster could ever run the job (Ray would keep such a task pending for ever)."""
    resources: dict[str, float] = {}
    offered = {k for n in nodes for k in n.resources}
    if job.gpus and job.gpu_model:
        key = ACCELERATOR_RESOURCE + accelerator_type(job.gpu_model)
        if key not in offered:
            have = sorted(k[len(ACCELERATOR_RESOURCE) :] for k in offered if k.startswith(ACCELERATOR_RESOURCE))
            raise EngineError(
                f"{job.name} asks for {job.gpu_model} GPUs ({key}); no Ray node offers it "
                f"(GPU types: {', '.join(have) or 'none'}); start a node with that GPU, or "
                f"add --resources '{{\"{key}\": 1}}' to its `ray start`"
            )
        resources[key] = MARKER
    # A cluster that labels its nodes with node types is held to them; one that does not
    # is placed by resources alone (a plan of this machine names its own node type).
    typed = any(k.startswith(NODE_TYPE_RESOURCE) for k in offered)
    type_key = NODE_TYPE_RESOURCE + job.node_class if job.node_class else None
    if typed and type_key:
        if type_key not in offered:
            have = sorted(k[len(NODE_TYPE_RESOURCE) :] for k in offered if k.startswith(NODE_TYPE_RESOURCE))
            raise EngineError(
                f"{job.name} is planned on node type {job.node_class}; no Ray node offers {type_key} "
                f"(node types: {', '.join(have)}); add --resources '{{\"{type_key}\": 1}}' to that node's `ray start`"
            )
        resources[type_key] = MARKER
    node_id = None
    if job.node:
        named = [n for n in nodes if n.name == job.node]
        if named:
            node_id = named[0].node_id
        elif not (typed and job.node == job.node_class):
            raise EngineError(
                f"{job.name} is pinned to node {job.node}; no Ray node has that name "
                f"(nodes: {', '.join(sorted(n.name for n in nodes))}); name it with "
                f"`ray start --labels {NODE_LABEL}={job.node}`"
            )
    request = TaskRequest(float(job.cpus), job.gpus, job.memory, resources, node_id)
    _check_fits(job, request, nodes)
    return request


def _check_fits(job: Job, req: TaskRequest, nodes: Sequence[RayNode]) -> None:
    wants = {"CPU": req.num_cpus, "GPU": float(req.num_gpus), "memory": float(req.memory), **req.resources}
    candidates = [n for n in nodes if req.node_id in (None, n.node_id)]
    for n in candidates:
        if all(v <= 0 or n.resources.get(k, 0.0) >= v for k, v in wants.items()):
            return
    where = f"node {job.node}" if req.node_id else "any Ray node"
    biggest = max(candidates, key=lambda n: (n.resources.get("GPU", 0), n.resources.get("CPU", 0)), default=None)
    has = (
        f"; the largest has {biggest.resources.get('CPU', 0):g} CPUs, {biggest.resources.get('GPU', 0):g} GPUs"
        if biggest
        else ""
    )
    raise EngineError(f"{job.name} asks for {req.describe()}, more than {where} has{has}")


# --- inside the task: GPUs and the container (run on the node Ray chose) ----------------


def with_gpus(spec: ContainerSpec, gpu_ids: Sequence[int], device_dir: str) -> ContainerSpec:
    """The spec with exactly the GPUs Ray assigned: their device nodes from ``device_dir``
    and the control nodes found there; inside numbered 0..n-1.  Real GPUs (``/dev``)
    go by CDI when a spec exists, else with the driver's libraries mounted."""
    env = {k: v for k, v in spec.env.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}
    devices = tuple(d for d in spec.devices if not os.path.basename(d[1]).startswith("nvidia"))
    if not gpu_ids:
        return replace(spec, env={**env, "NVIDIA_VISIBLE_DEVICES": "void"}, devices=devices)
    inside = ",".join(str(i) for i in range(len(gpu_ids)))
    env |= {
        "NVIDIA_VISIBLE_DEVICES": inside,
        "CUDA_VISIBLE_DEVICES": inside,
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    env["HETFLOW_RAY_GPU_IDS"] = ",".join(str(i) for i in gpu_ids)
    real = os.path.realpath(device_dir) == "/dev"
    if real:
        cdi = cdi_device_names()
        if all(str(i) in cdi for i in gpu_ids):
            return replace(spec, env=env, devices=devices, cdi_devices=tuple(f"nvidia.com/gpu={i}" for i in gpu_ids))
    minors = [_minor(i) if real else i for i in gpu_ids]
    devices += tuple((f"{device_dir}/nvidia{m}", f"/dev/nvidia{m}") for m in minors)
    devices += tuple((f"{device_dir}/{c}", f"/dev/{c}") for c in CONTROL_DEVICES if os.path.exists(f"{device_dir}/{c}"))
    mounts = spec.mounts
    if real and (libs := driver_mounts()):
        mounts += tuple(libs)
        env["LD_LIBRARY_PATH"] = f"{DRIVER_DIR}/lib64"
    return replace(spec, env=env, devices=devices, mounts=mounts)


def _minor(index: int) -> int:
    """A real GPU's device minor (/dev/nvidiaM) from its NVML index; they differ on some
    machines, and the driver matches nodes to GPUs by minor."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(index)))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this node: the usual case, minor = index
        return index


def foreground_argv(spec: ContainerSpec) -> list[str]:
    """``podman run --rm`` in the foreground: the hardened ``run -d`` arguments without
    ``-d``; the exit code of ``podman run`` is the container's."""
    args = run_args(spec, engine="podman")
    args.remove("-d")
    return ["podman", "--hooks-dir", str(SHARE / "hooks.d"), args[0], "--rm", *args[1:]]


def run_container(spec: ContainerSpec, stop_timeout: int) -> tuple[int, str, str]:
    """Run to the end; (exit code, status, reason).  A Ray cancel arrives as
    KeyboardInterrupt (ray.cancel, force=False): the container is stopped, and stopped
    again until ``podman run`` returns, since it may not have existed at the first stop."""
    binary = shutil.which("podman")
    if binary is None:
        return 127, "EXITED", f"podman not found on node {_here()}: apt-get install -y podman runc"
    argv = [binary, *foreground_argv(spec)[1:]]
    env = engine_env()
    proc: subprocess.Popen[bytes] | None = None
    with tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
            code, status = _wait(proc), "EXITED"
        except KeyboardInterrupt:
            code, status = _stop(binary, spec.name, proc, stop_timeout, env), "CANCELLED"
        err.seek(0)
        lines = err.read().decode(errors="replace").strip().splitlines()
    reason = lines[-1] if lines and code in (125, 126, 127) else ""
    return code, status, reason


def _wait(proc: subprocess.Popen[bytes]) -> int:
    """Wait for ``podman run``, waking every 0.5 s: Ray's cancel is a simulated SIGINT
    (``_thread.interrupt_main``) that a blocking waitpid would not see.  A pidfd
    (Linux 5.3) makes the wait end the moment the process does."""
    try:
        pidfd: int | None = os.pidfd_open(proc.pid)
    except OSError:
        pidfd = None
    try:
        while True:
            if pidfd is not None:
                select.select([pidfd], [], [], 0.5)
            try:
                return proc.wait(timeout=0 if pidfd is not None else 0.5)
            except subprocess.TimeoutExpired:
                continue
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _stop(binary: str, name: str, proc: subprocess.Popen[bytes] | None, timeout: int, env: Mapping[str, str]) -> int:
    stop = [binary, "stop", "--ignore", "-t", str(timeout), name]
    if proc is None:  # interrupted inside Popen: stop whatever may have started, once
        subprocess.run(stop, env=env, capture_output=True, check=False)
        return CANCELLED_CODE
    while proc.poll() is None:
        subprocess.run(stop, env=env, capture_output=True, check=False)
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            continue
    return proc.returncode  # the container's own code: 137 or 143 when stopped, 0 if it had just finished


def _ray_nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


def _here() -> str:
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    for n in _ray_nodes():
        if n["NodeID"] == node_id:
            return node_name(n.get("Labels") or {}, n.get("Resources") or {}, node_id)
    return node_id


@ray.remote(max_retries=0)
def _step_task(spec: ContainerSpec, device_dir: str, stop_timeout: int, keeper: Any) -> tuple[int, str, str]:
    """One step attempt on the node Ray chose.  Never retried by Ray: hetflow decides."""
    try:
        gpu_ids = [int(i) for i in ray.get_gpu_ids()]
        keeper.started.remote(spec.name, ray.get_runtime_context().get_node_id(), tuple(gpu_ids))
        if "{node}" in device_dir and gpu_ids:
            device_dir = device_dir.replace("{node}", _here())
        return run_container(with_gpus(spec, gpu_ids, device_dir), stop_timeout)
    except KeyboardInterrupt:
        return CANCELLED_CODE, "CANCELLED", "cancelled before its container started"


@ray.remote(num_cpus=0, max_retries=0)
def _probe(image: str | None) -> tuple[str, bool, bool]:
    """(node, podman found, image present) on the node it runs on."""
    binary = shutil.which("podman")
    present = False
    if binary and image:
        proc = subprocess.run([binary, "image", "exists", image], env=engine_env(), capture_output=True, check=False)
        present = proc.returncode == 0
    return _here(), binary is not None, present


# --- the run's keeper: a detached actor that owns the run's tasks -----------------------


@dataclass
class _Entry:
    ref: Any  # ObjectRef of _step_task
    request: TaskRequest
    node_id: str | None = None
    gpus: tuple[int, ...] = ()
    cancelled: bool = False
    result: JobState | None = None


class RunKeeper:
    """Owns one run's step tasks (so they outlive the driver that submitted them) and
    answers for them by name."""

    def __init__(self, run_id: str, idle_timeout: float) -> None:
        self.run_id = run_id
        self.jobs: dict[str, _Entry] = {}
        self.names: dict[str, str] = {}  # Ray node id -> hetflow name
        self.touched = time.monotonic()
        threading.Thread(target=self._linger, args=(idle_timeout,), daemon=True).start()

    def _linger(self, idle_timeout: float) -> None:
        while True:
            time.sleep(min(5.0, idle_timeout))
            if not self.jobs and time.monotonic() - self.touched > idle_timeout:
                ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
                return

    def submit(self, name: str, spec: ContainerSpec, req: TaskRequest, device_dir: str, stop_timeout: int) -> None:
        self.touched = time.monotonic()
        if name in self.jobs:
            raise ValueError(f"a job named {name} was already submitted to Ray")
        options: dict[str, Any] = {"num_cpus": req.num_cpus, "num_gpus": req.num_gpus, "name": name}
        if req.memory:
            options["memory"] = req.memory
        if req.resources:
            options["resources"] = dict(req.resources)
        if req.node_id:
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(req.node_id, soft=False)
        me = ray.get_runtime_context().current_actor
        ref = _step_task.options(**options).remote(spec, device_dir, stop_timeout, me)
        self.jobs[name] = _Entry(ref, req)

    def started(self, name: str, node_id: str, gpus: tuple[int, ...]) -> None:
        if name in self.jobs:
            self.jobs[name].node_id, self.jobs[name].gpus = node_id, gpus

    def states(self) -> dict[str, JobState]:
        self.touched = time.monotonic()
        waiting = [e.ref for e in self.jobs.values() if e.result is None]
        ready = set(ray.wait(waiting, num_returns=len(waiting), timeout=0)[0]) if waiting else set()
        out = {}
        for name, e in self.jobs.items():
            if e.result is None and e.ref in ready:
                e.result = self._finished(name, e)
            out[name] = e.result or self._live(name, e)
        return out

    def _live(self, name: str, e: _Entry) -> JobState:
        if e.node_id is None:
            return JobState(name, True, None, "PENDING", reason=f"waiting for Ray to place it ({e.request.describe()})")
        return JobState(name, True, None, "RUNNING", self._name(e.node_id), e.gpus)

    def _finished(self, name: str, e: _Entry) -> JobState:
        node = self._name(e.node_id) if e.node_id else None
        try:
            code, status, reason = ray.get(e.ref)
        except TaskCancelledError:
            code, status, reason = CANCELLED_CODE, "CANCELLED", "cancelled"
        except RayError as exc:  # the worker or its node died, Ray killed it for memory, a bug
            text = str(exc).strip().splitlines()
            return JobState(name, False, None, "LOST", node, e.gpus, f"{type(exc).__name__}: {text[0] if text else ''}")
        return JobState(name, False, int(code), status, node, e.gpus, reason)

    def _name(self, node_id: str) -> str:
        if node_id not in self.names:
            for n in _ray_nodes():
                self.names[n["NodeID"]] = node_name(n.get("Labels") or {}, n.get("Resources") or {}, n["NodeID"])
        return self.names.get(node_id, node_id)

    def cancel(self, names: list[str]) -> None:
        self.touched = time.monotonic()
        for name in names:
            e = self.jobs.get(name)
            if e is not None and e.result is None and not e.cancelled:
                e.cancelled = True
                ray.cancel(e.ref)  # force=False: KeyboardInterrupt in the task, which stops the container

    def release(self, names: list[str]) -> int:
        """Forget the jobs (cancelling any still running); returns how many are left."""
        self.cancel(names)
        for name in names:
            self.jobs.pop(name, None)
        return len(self.jobs)


_Keeper = ray.remote(num_cpus=0, max_restarts=0)(RunKeeper)


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
    capabilities = Capabilities(name="ray", holds_dependencies=False, assigns_gpus=True, multi_node=True)

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
            ray.init(address=address, **kw)
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
                for n in _ray_nodes()
                if n.get("Alive")
            ]
            self._nodes = (time.monotonic(), cached)
        return cached

    def _probe_nodes(self, nodes: Sequence[RayNode], image: str | None) -> list[tuple[str, bool, bool]]:
        refs = [
            _probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n.node_id, soft=False)).remote(image)
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
            self._keepers[run_id] = _Keeper.options(
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
        self._connect()
        req = task_request(job, self.nodes())
        s = self.settings
        for _ in range(2):  # the run's actor may have just ended for idleness: make a new one
            keeper = self._new_keeper(job.run_id)
            try:
                ray.get(keeper.submit.remote(job.name, job.container, req, s.device_dir, s.stop_timeout), timeout=120)
                return
            except RayActorError:
                self._keepers.pop(job.run_id, None)
            except RayTaskError as exc:
                raise EngineError(f"Ray refused {job.name}: {exc.cause if exc.cause else exc}") from None
        raise EngineError(f"Ray could not keep an actor alive for run {job.run_id}; see `ray status`")

    def poll(self, run_id: str) -> dict[str, JobState]:
        self._connect()
        states = self._call(run_id, "states")
        return dict(states) if states else {}

    def cancel(self, names: Iterable[str]) -> None:
        """Stop the jobs and wait (a bounded while) for them to end, as ``podman stop``
        does for the local backend, so that a poll right after sees their exit codes."""
        self._connect()
        groups = self._keepers_for(names)
        for run_id, group in groups.items():
            self._call(run_id, "cancel", group)
        deadline = time.monotonic() + self.settings.stop_timeout + 15
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
