"""``FakeEngine``: an in-memory container engine for unit tests (the fake beside the
``ContainerEngine`` seam, as ``inventory.fakes.gpus`` is beside the probes): ``behave(spec)``
decides each container's exit code, run time and the files it writes to /out, a given
clock decides when it ends.  No process, no podman."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.errors import EngineError
from hetflow.execute.engine import UNKNOWN, ContainerSpec, ContainerState, Usage
from hetflow.kube import LABEL_RUN


@dataclass
class _FakeContainer:
    spec: ContainerSpec
    started: float
    duration: float
    exit_code: int
    stopped: bool = False


@dataclass
class FakeEngine:
    """An in-memory engine for unit tests: ``behave(spec) -> (exit_code, duration,
    files)`` decides what a container does; files are written into its /out mount."""

    clock: Callable[[], float]
    behave: Callable[[ContainerSpec], tuple[int, float, Mapping[str, bytes]]] = lambda spec: (
        0,
        0.0,
        {},
    )
    images: set[str] = field(default_factory=set)
    measure: Callable[[ContainerSpec], Usage] = lambda spec: UNKNOWN  # what usage() reports
    started: list[ContainerSpec] = field(default_factory=list)
    containers: dict[str, _FakeContainer] = field(default_factory=dict)
    networks: dict[str, bool] = field(default_factory=dict)  # name -> internal
    name: str = "fake"

    def create_network(self, name: str, *, internal: bool, labels: Mapping[str, str]) -> None:
        self.networks.setdefault(name, internal)

    def remove_network(self, name: str) -> None:
        self.networks.pop(name, None)

    def image_exists(self, image: str) -> bool:
        return image in self.images

    def image_id(self, image: str) -> str | None:
        return f"fake:{image}" if image in self.images else None

    def start(self, spec: ContainerSpec) -> None:
        if spec.name in self.containers:
            raise EngineError(f"fake: the container name {spec.name!r} is already in use")
        code, duration, files = self.behave(spec)
        for m in spec.mounts:
            if m.target == "/out":
                for rel, data in files.items():
                    p = Path(m.source) / rel
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(data)
        self.started.append(spec)
        self.containers[spec.name] = _FakeContainer(spec, self.clock(), duration, code)

    def states(self, run_id: str) -> dict[str, ContainerState]:
        now = self.clock()
        out = {}
        for name, c in self.containers.items():
            if c.spec.labels.get(LABEL_RUN) != run_id:
                continue
            running = not c.stopped and now < c.started + c.duration
            code = None if running else (137 if c.stopped else c.exit_code)
            out[name] = ContainerState(name, running, code, "running" if running else "exited", dict(c.spec.labels))
        return out

    def all_runs(self) -> dict[str, ContainerState]:
        out: dict[str, ContainerState] = {}
        for run_id in {c.spec.labels.get(LABEL_RUN) for c in self.containers.values()}:
            if run_id is not None:
                out.update(self.states(run_id))
        return out

    def run_networks(self) -> dict[str, str]:
        """The fake keeps no labels on networks: a gang network's run is in its name."""
        return {n: n.split("-")[1] for n in self.networks if n.startswith("hf-") and n.count("-") >= 2}

    def stop(self, names: Iterable[str], timeout: int = 10) -> None:
        for n in names:
            if n in self.containers:
                self.containers[n].stopped = True

    def remove(self, names: Iterable[str]) -> None:
        for n in names:
            self.containers.pop(n, None)

    def usage(self, name: str) -> Usage:
        c = self.containers.get(name)
        return UNKNOWN if c is None else self.measure(c.spec)

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return None
