"""This machine: each job is a podman (or docker) container; hetflow leases the GPUs."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from hetflow.execute.backends.base import Capabilities, Job, JobState, MeasuresUsage
from hetflow.execute.engine import UNKNOWN, CliEngine, ContainerEngine, Usage, make_engine


class LocalBackend:
    capabilities = Capabilities(name="local")

    def __init__(self, engine: ContainerEngine | None = None, env: Mapping[str, str] | None = None) -> None:
        self.engine: ContainerEngine = engine or make_engine(env)

    def check(self) -> None:
        pass  # make_engine already said what to install when no engine is found

    def image_exists(self, image: str) -> bool:
        return self.engine.image_exists(image)

    def image_id(self, image: str) -> str | None:
        lookup = getattr(self.engine, "image_id", None)  # engines made for tests may not say
        return lookup(image) if lookup is not None else None

    def submit(self, job: Job) -> None:
        self.engine.start(job.container)

    def poll(self, run_id: str) -> dict[str, JobState]:
        return {
            name: JobState(name, st.running, st.exit_code, st.status) for name, st in self.engine.states(run_id).items()
        }

    def cancel(self, names: Iterable[str]) -> None:
        self.engine.stop(names)

    def release(self, names: Iterable[str]) -> None:
        self.engine.remove(names)

    def usage(self, name: str) -> Usage:
        """What the engine measured (podman: the attempt's cgroup); an engine that cannot
        measure (a test's own engine) leaves it unknown."""
        return self.engine.usage(name) if isinstance(self.engine, MeasuresUsage) else UNKNOWN

    def watch(self, run_id: str, wake: Callable[[], None]) -> Callable[[], None] | None:
        return self.engine.watch(run_id, wake)

    def pull(self, ref: str, *, insecure: bool = False) -> None:
        if isinstance(self.engine, CliEngine):
            self.engine.pull(ref, insecure=insecure)
