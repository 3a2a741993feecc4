"""Which engine runs steps here: podman (``podman.CliEngine``), or docker where podman is
absent (``DockerEngine``: the same commands minus podman's extras); ``make_engine`` chooses."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from hetflow.config import find_engine
from hetflow.errors import EngineError
from hetflow.execute.backends.local.podman import CliEngine
from hetflow.execute.engine import ContainerSpec, ContainerState, cri_lines
from hetflow.kube import LABEL_RUN


class DockerEngine(CliEngine):
    """docker where podman is absent: the same commands, minus podman's extras (no
    ``--ignore``, ``ps`` prints one JSON object per line without exit codes, logs stay in
    docker's json-file and are copied to hetflow's log file before removal)."""

    def __init__(self, binary: str, env: Mapping[str, str] | None = None) -> None:
        super().__init__(binary, env)  # no per-attempt cgroups: docker has no --cgroups=no-conmon
        self._logs: dict[str, str] = {}

    def start(self, spec: ContainerSpec) -> None:
        if spec.secrets:
            # docker's secrets belong to swarm services; `docker run` has no --secret
            raise EngineError(f"step secrets ({', '.join(sorted(spec.secrets))}) need podman; docker cannot mount them")
        super().start(spec)
        if spec.log_path:
            self._logs[spec.name] = spec.log_path

    def _listed_states(self, run_id: str) -> dict[str, ContainerState]:
        proc = self._run(["ps", "-a", "-q", "--filter", f"label={LABEL_RUN}={run_id}"])
        ids = proc.stdout.split()
        if not ids:
            return {}
        fmt = "{{.Name}} {{.State.Status}} {{.State.ExitCode}}"
        out: dict[str, ContainerState] = {}
        for line in self._run(["inspect", "--format", fmt, *ids], check=False).stdout.splitlines():
            name, status, code = line.strip().lstrip("/").split(" ")
            running = status in ("created", "running", "restarting", "paused")
            out[name] = ContainerState(name, running, None if running else int(code), status)
        return out

    def stop(self, names: Iterable[str], timeout: int = 10) -> None:
        names = list(names)
        if names:
            self._run(["stop", "-t", str(timeout), *names], check=False, timeout=timeout + 60)

    def _remove_now(self, names: list[str]) -> None:
        for n in names:
            path = self._logs.pop(n, None)
            if path:
                logs = self._run(["logs", "--timestamps", n], check=False)
                Path(path).write_text(cri_lines(logs.stdout, "stdout") + cri_lines(logs.stderr, "stderr"))
        self._run(["rm", "-f", *names], check=False)


def make_engine(env: Mapping[str, str] | None = None) -> CliEngine:
    """podman, or docker where podman is absent (or HETFLOW_ENGINE says so)."""
    binary = find_engine(env)
    return DockerEngine(binary, env) if Path(binary).name == "docker" else CliEngine(binary, env)
