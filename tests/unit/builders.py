"""Small builders shared by the spec, plan, state and runner tests.

Workflows are written as YAML text (line numbers are part of what is tested); nodes
and GPUs are built directly; the runner is driven by ``FakeEngine`` and a ``FakeClock``
that only moves when the runner sleeps, so every time in a test is exact.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.execute.backends.base import Job
from hetflow.execute.backends.local.fakeengine import FakeEngine
from hetflow.execute.engine import ContainerEngine, ContainerSpec
from hetflow.execute.run.compose import compose_runner
from hetflow.execute.run.options import ProcessSeams, RunOptions
from hetflow.execute.run.runner import Runner, RunnerConfig
from hetflow.execute.submit.record import create_run
from hetflow.inventory.models import Cpu, Gpu, GpuSharing, Node
from hetflow.kube import LABEL_ATTEMPT, LABEL_STEP
from hetflow.spec import GpuRequest
from hetflow.spec.load.loader import LoadedWorkflow, parse_workflow
from hetflow.state.models import RunRecord, StepRecord
from hetflow.state.store import Store

GIB = 1024**3
MIB = 1024**2

# Three lines, so the first step's name is on line 4 of every workflow built here.
HEADER = "apiVersion: hetflow/v1\nname: wf\nsteps:\n"


def steps_yaml(body: str) -> str:
    """A workflow whose ``steps:`` mapping is ``body`` (dedented, then indented 2)."""
    return HEADER + textwrap.indent(textwrap.dedent(body).strip("\n") + "\n", "  ")


def load(text: str, overrides: Mapping[str, object] | None = None) -> LoadedWorkflow:
    return parse_workflow(text, "wf.yaml", overrides)


def load_steps(body: str) -> LoadedWorkflow:
    return load(steps_yaml(body))


# --- inventory ---------------------------------------------------------------------------


def cpu(cores: int = 4) -> Cpu:
    return Cpu(
        vendor="GenuineIntel",
        model="Test CPU",
        architecture="x86_64",
        microarchitecture="skylake",
        x86_64_level=3,
        cores=cores,
    )


def gpu(
    index: int = 0,
    *,
    model: str = "NVIDIA A100-SXM4-40GB",
    memory_gib: float = 40,
    cc: str = "8.0",
    fake: bool = True,
    minor: int | None = None,
    uuid: str | None = None,
) -> Gpu:
    minor = index if minor is None else minor
    return Gpu(
        index=index,
        uuid=uuid or f"GPU-{index:08d}-test",
        model=model,
        memory_bytes=int(memory_gib * GIB),
        compute_capability=cc,
        driver_version="fake" if fake else "550.54.15",
        device_path=f"/dev/nvidia{minor}",
        minor=minor,
        fake=fake,
    )


def node(
    *,
    cpus: int = 4,
    memory_gib: float = 16,
    gpus: tuple[Gpu, ...] = (),
    control_devices: tuple[str, ...] = (),
) -> Node:
    return Node(
        name="test-node",
        cpu=cpu(cpus),
        memory_bytes=int(memory_gib * GIB),
        gpus=gpus,
        gpu_source="fake" if gpus else "none",
        control_devices=control_devices,
    )


# --- the runner's world ------------------------------------------------------------------


class Crash(Exception):
    """Stands for the executor being killed at an instant (SIGKILL, power loss)."""


@dataclass
class FakeClock:
    """Time that moves only when the runner sleeps.

    ``at`` runs a callback from the first sleep that reaches its time (another process
    acting meanwhile); ``crash_at`` raises Crash there (once); ``limit`` turns a runner
    that never ends into a failing test instead of a hung one."""

    now: float = 1000.0
    crash_at: float | None = None
    limit: float = 5000.0
    at: dict[float, Callable[[], object]] = field(default_factory=dict)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for when in sorted(t for t in self.at if t <= self.now):
            self.at.pop(when)()
        if self.crash_at is not None and self.now >= self.crash_at:
            self.crash_at = None
            raise Crash(f"crash at t={self.now}")
        if self.now > 1000.0 + self.limit:
            raise AssertionError(f"the runner did not finish within {self.limit}s of fake time")


@dataclass(frozen=True)
class Outcome:
    """What one container does: its exit code, how long it runs, what it writes to /out."""

    exit_code: int = 0
    duration: float = 1.0
    files: Mapping[str, bytes] = field(default_factory=dict)
    log: tuple[str, ...] = ()  # stdout lines, written to the k8s-file log as podman would


@dataclass(frozen=True)
class Started:
    """One container start as the fake engine saw it."""

    step: str
    attempt: int
    at: float
    duration: float
    spec: ContainerSpec
    inputs: Mapping[str, bytes]  # what each /in mount held when the container started

    @property
    def until(self) -> float:
        return self.at + self.duration


@dataclass
class Script:
    """``behave`` for FakeEngine: outcomes per step, one per attempt (the last repeats)."""

    clock: FakeClock
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    log: list[Started] = field(default_factory=list)

    def __call__(self, spec: ContainerSpec) -> tuple[int, float, Mapping[str, bytes]]:
        step, attempt = spec.labels[LABEL_STEP], int(spec.labels[LABEL_ATTEMPT])
        plan = self.outcomes.get(step) or [Outcome()]
        out = plan[min(attempt, len(plan)) - 1]
        inputs = {
            m.target: Path(m.source).read_bytes()
            for m in spec.mounts
            if m.target.startswith("/in/") and Path(m.source).is_file()
        }
        self.log.append(Started(step, attempt, self.clock(), out.duration, spec, inputs))
        if out.log and spec.log_path:
            Path(spec.log_path).write_text(
                "".join(f"2024-05-01T10:00:00.000000000Z stdout F {line}\n" for line in out.log)
            )
        return out.exit_code, out.duration, out.files

    def starts(self, step: str) -> list[Started]:
        return [s for s in self.log if s.step == step]


@dataclass
class World:
    """A store, a fake engine and a fake clock around one run of one workflow."""

    home: Path
    loaded: LoadedWorkflow
    node: Node
    clock: FakeClock
    script: Script
    engine: FakeEngine
    store: Store
    run: RunRecord
    config: RunnerConfig = field(default_factory=lambda: RunnerConfig(poll_interval=1.0, retry_backoff=2.0))

    def runner(self, *, pid: int = 4242, engine: ContainerEngine | None = None) -> Runner:
        # No executor pid is alive here: a different pid after a Crash stands for the
        # restarted hetflow process, and the dead one's claim and leases are stale.
        return compose_runner(
            store=self.store,
            engine=engine or self.engine,
            node=self.node,
            workflow=self.loaded.workflow,
            run=self.store.run(self.run.id),
            options=RunOptions(config=self.config),
            seams=ProcessSeams(clock=self.clock, sleep=self.clock.sleep, pid=pid, alive=lambda p: False),
        )

    def execute(self, *, pid: int = 4242, engine: ContainerEngine | None = None) -> str:
        return self.runner(pid=pid, engine=engine).execute()

    def step(self, name: str) -> StepRecord:
        return self.store.step(self.run.id, name)


def world(
    tmp_path: Path,
    body: str,
    *,
    node_: Node | None = None,
    outcomes: Mapping[str, list[Outcome]] | None = None,
) -> World:
    """A run of ``steps_yaml(body)`` created as ``hetflow run`` creates it."""
    loaded = load_steps(body)
    clock = FakeClock()
    script = Script(clock, {k: list(v) for k, v in (outcomes or {}).items()})
    engine = FakeEngine(clock=clock, behave=script)
    home = tmp_path / "home"
    store = Store(home / "state.db")
    run = create_run(store, loaded, home, os.getuid(), os.getgid())
    return World(home, loaded, node_ or node(), clock, script, engine, store, run)


def gpu_job(req: GpuRequest | None, model: str | None = None, *, sharing: GpuSharing | None = None) -> Job:
    """A backend Job of one container asking for ``req`` (the backends' GPU mapping tests)."""
    spec = ContainerSpec(name="hf-r1-s-1", image="img", command=("true",), user="1000:1000", labels={}, env={})
    return Job(
        name="hf-r1-s-1",
        run_id="r1",
        step="s",
        attempt=1,
        container=spec,
        cpus=1,
        memory=1 << 30,
        gpus=req.count if req else 0,
        gpu_model=model,
        gpu_request=req,
        gpu_sharing=sharing,
    )
