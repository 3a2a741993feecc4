"""The real container engine: podman (``CliEngine``) or docker (``DockerEngine``), driven
through its command line with the arguments ``engine.run_args`` gives a spec.

Containers are started detached with deterministic names and hetflow labels, and are not
``--rm``: an exit code must survive a crash of hetflow so that ``resume`` can collect it.
While a run is watched, exits arrive from attached ``podman run`` processes
(``exits.ExitWatch``), and removals (after reading each container's cgroup: ``cgroups``)
happen in the background in batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hetflow.config import SHARE, engine_env, find_engine
from hetflow.errors import EngineError
from hetflow.execute.backends.local import cgroups, orphans
from hetflow.execute.backends.local.exits import Batches, ExitWatch
from hetflow.execute.backends.local.imagefacts import ImageFacts
from hetflow.execute.backends.local.ociruntime import RuntimeChoice, check_setting, engine_choice, which_on
from hetflow.execute.engine import (
    ENV_FILE_WAIT,
    NEVER_STARTED,
    UNKNOWN,
    ContainerSpec,
    ContainerState,
    Measured,
    Usage,
    drop_env_file,
    run_args,
    secret_name,
    usage_from_inspect,
    write_env_file,
)
from hetflow.kube import LABEL_RUN

ENV_FILE_FIRST_ASK = 0.3  # seconds: an attached run creates its container in about this (2 cores, podman 4.3)
STOP_SEEN = 10.0  # seconds a stop waits for the watch to learn the exits of what it stopped


@dataclass(frozen=True)
class _Removal:
    """Containers to remove (reading first what those in ``measure`` used), or a network."""

    containers: tuple[str, ...] = ()
    measure: tuple[str, ...] = ()
    measured: Measured | None = None
    network: str = ""


class CliEngine(ImageFacts):
    """podman (or docker) through its CLI, with hetflow's containers.conf.

    ``--hooks-dir`` points podman at an empty directory so an installed NVIDIA OCI hook
    cannot read NVIDIA_VISIBLE_DEVICES from an image and add GPUs behind our back."""

    def __init__(self, binary: str | None = None, env: Mapping[str, str] | None = None) -> None:
        self.binary = binary or find_engine(env)
        self.name = Path(self.binary).name
        self._env = engine_env(env)
        self._global = ["--hooks-dir", str(SHARE / "hooks.d")] if self.name == "podman" else []
        # Per-attempt parent cgroups need cgroupfs (hetflow's containers.conf) and root.
        self._cgroups = cgroups.detect() if self.name == "podman" else None
        self._watch: ExitWatch | None = None  # the watched run's containers (``watch``)
        self._watch_run: str | None = None
        self._later: Batches[_Removal] | None = None  # removals in the background while a run is watched
        if self.name == "podman":
            check_setting(self._env, which_on(self._env))  # HETFLOW_OCI_RUNTIME naming nothing: refused now
        self._runtime: RuntimeChoice | None = None  # chosen at the first start (``runtime``)
        self._drops: list[threading.Thread] = []  # attached runs' env files and secrets to drop
        self._closing = threading.Event()  # set while the watch ends: drop them now

    def _run(
        self,
        args: list[str],
        *,
        check: bool = True,
        timeout: float = 120,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        try:
            proc = subprocess.run(
                [self.binary, *self._global, *args],
                capture_output=True,
                text=True,
                env={**self._env, **env} if env else self._env,
                timeout=timeout,
                check=False,
                input=stdin,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(f"{self.name} {args[0]} did not answer within {timeout:.0f}s") from None
        except OSError as exc:
            raise EngineError(f"cannot run {self.binary}: {exc}") from None
        if check and proc.returncode != 0:
            raise EngineError(f"{self.name} {args[0]} failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def command(self, args: list[str], *, timeout: float, env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
        """``podman ARGS`` with hetflow's flags and ``env`` over its environment, unchecked
        (``execute.checkpoint``: checkpoint and restore, with CRIU first on PATH)."""
        self.runtime()
        return self._run(args, check=False, timeout=timeout, env=env)

    def prepare_cgroup(self, name: str) -> str | None:
        """The parent cgroup a container ``name`` is measured in, made now (None: not measured)."""
        if self._cgroups is not None and cgroups.prepare(self._cgroups, name):
            return cgroups.parent_path(name)
        return None

    def follow(self, name: str, labels: Mapping[str, str]) -> None:
        """Watch a container started outside ``start`` (a restored one) as ``start``'s are."""
        watch = self._watching(labels.get(LABEL_RUN))
        if watch is not None:
            pid = ((self._inspect_entry(name) or {}).get("State") or {}).get("ConmonPid")
            watch.follow(name, labels, int(pid) if pid else None)

    def create_network(self, name: str, *, internal: bool, labels: Mapping[str, str]) -> None:
        if self._run(["network", "inspect", name], check=False).returncode == 0:
            return
        args = ["network", "create", *(["--internal"] if internal else [])]
        for k, v in sorted(labels.items()):
            args += ["--label", f"{k}={v}"]
        proc = self._run([*args, name], check=False)
        if proc.returncode != 0:
            err = proc.stderr.strip().splitlines()
            raise EngineError(f"{self.name} could not create network {name}: {err[-1] if err else proc.returncode}")

    def remove_network(self, name: str) -> None:
        self._now_or_later(_Removal(network=name))

    def _remove_network_now(self, name: str) -> None:
        self._run(["network", "rm", "-f", name], check=False)

    def image_entrypoint(self, image: str) -> tuple[str, ...] | None:
        """The image's ENTRYPOINT (() when it has none; None when there is no such image)."""
        proc = self._run(["image", "inspect", "--format", "{{json .Config.Entrypoint}}", image], check=False)
        if proc.returncode != 0:
            return None
        try:
            got = json.loads(proc.stdout.strip() or "null")
        except ValueError:
            return None
        return tuple(str(a) for a in got) if isinstance(got, list) else ()

    def pull(self, ref: str, *, insecure: bool = False) -> None:
        """Pull one build by digest (what the resolver chose), not the tag's first entry."""
        args = ["pull", "-q", *(["--tls-verify=false"] if insecure and self.name == "podman" else []), ref]
        self._run(args, timeout=1800)

    def runtime(self) -> RuntimeChoice | None:
        """The OCI runtime podman starts this engine's containers with, and why (``ociruntime``:
        a probe once per machine state, cached in HETFLOW_HOME); None for docker."""
        if self.name == "podman" and self._runtime is None:
            conf = self._env["CONTAINERS_CONF"]
            self._runtime = engine_choice([self.binary, *self._global], self._env, conf)
            self._global = [*self._global, "--runtime", self._runtime.name]
        return self._runtime

    def start(self, spec: ContainerSpec) -> None:
        self.runtime()
        if self._cgroups is not None and cgroups.prepare(self._cgroups, spec.name):
            spec = replace(spec, cgroup_parent=cgroups.parent_path(spec.name))
        watch = self._watching(spec.labels.get(LABEL_RUN))
        secrets = self._create_secrets(spec)
        try:
            env_file = write_env_file(spec.env) if spec.env else None
        except BaseException:
            self._drop_secrets(secrets)
            raise
        if watch is not None and self.name == "podman":
            # as a shell loop of `podman run` would: the run stays attached and its exit is
            # the container's (no `wait` after it); a refusal comes back the same way
            attached = [self.binary, *self._global, *run_args(spec, engine=self.name, attached=True, env_file=env_file)]
            cwd = os.path.dirname(spec.log_path) if spec.log_path else None
            try:
                watch.attach(
                    spec.name, spec.labels, attached, engine=self.name, cwd=cwd if cwd and os.path.isdir(cwd) else None
                )
            except BaseException:
                drop_env_file(env_file)
                self._drop_secrets(secrets)
                raise
            if env_file is not None or secrets:
                dropper = threading.Thread(
                    target=self._drop_once_created,
                    args=(watch, spec.name, env_file, secrets),
                    name=f"env-{spec.name}",
                    daemon=True,
                )
                self._drops = [*(t for t in self._drops if t.is_alive()), dropper]
                dropper.start()
            return
        try:
            proc = self._run(run_args(spec, engine=self.name, env_file=env_file), check=False)
        finally:
            drop_env_file(env_file)  # `run -d` has created and started the container (or failed)
            self._drop_secrets(secrets)
        if proc.returncode != 0:
            # A container the runtime could not start stays "created"; remove it so the
            # same deterministic name can be used again.
            self._run(["rm", "-f", spec.name], check=False)
            self._remove_cgroups([spec.name])
            err = proc.stderr.strip().splitlines()
            raise EngineError(f"{self.name} could not start {spec.name}: {err[-1] if err else proc.returncode}")
        if watch is not None:
            watch.follow(spec.name, spec.labels, None)  # docker: its own `wait`

    def _drop_once_created(self, watch: ExitWatch, name: str, env_file: Path | None, secrets: list[str]) -> None:
        """Remove an attached run's env file (and its podman secrets) once its container
        exists: podman reads the file, and copies each secret into the container's storage,
        before it creates the container, so they are on disk for that moment only."""
        deadline = time.monotonic() + ENV_FILE_WAIT
        # each question is a podman process that takes podman's lock: ask first once podman
        # has usually created the container, not at once (three questions a step slowed starts)
        (closing := self._closing).wait(ENV_FILE_FIRST_ASK)
        while time.monotonic() < deadline and (env_file is None or env_file.exists()) and not watch.exited(name):
            if self._run(["container", "exists", name], check=False, timeout=30).returncode == 0:
                break
            if closing.wait(0.1):
                break  # the watch is ending (``watch``'s stopper): what it launched has run
        drop_env_file(env_file)
        self._drop_secrets(secrets)

    def _create_secrets(self, spec: ContainerSpec) -> list[str]:
        """One podman secret per value of ``spec.secrets`` (the value on stdin, never on a
        command line), named after the container; an older one of that name (a crashed
        executor's) is replaced."""
        made: list[str] = []
        try:
            for name, value in sorted(spec.secrets.items()):
                secret = secret_name(spec.name, name)
                self._run(["secret", "rm", secret], check=False)
                proc = self._run(["secret", "create", secret, "-"], check=False, stdin=value)
                if proc.returncode != 0:
                    raise EngineError(
                        f"{self.name} could not hold secret {name} for {spec.name}: {proc.stderr.strip()}"
                    )
                made.append(secret)
        except BaseException:
            self._drop_secrets(made)
            raise
        return made

    def _drop_secrets(self, secrets: list[str]) -> None:
        if secrets:
            self._run(["secret", "rm", *secrets], check=False)

    def states(self, run_id: str) -> dict[str, ContainerState]:
        """From the exit watch when it watches ``run_id``, else as the engine lists them."""
        watch = self._watching(run_id)
        if watch is not None:
            return {
                name: ContainerState(name, running, code, status, labels, reason)
                for name, (running, code, status, labels, reason) in watch.snapshot().items()
            }
        return self._listed_states(run_id)

    def _listed_states(self, run_id: str) -> dict[str, ContainerState]:
        proc = self._run(["ps", "-a", "--filter", f"label={LABEL_RUN}={run_id}", "--format", "json"])
        return _listed(proc.stdout, lambda state: state in ("running", *orphans.UNSTARTED, "paused", "stopping"))

    def all_runs(self) -> dict[str, ContainerState]:
        """Every container of every hetflow run (label ``hetflow.run``), for ``hetflow doctor``."""
        proc = self._run(["ps", "-a", "--filter", f"label={LABEL_RUN}", "--format", "json"])
        return _listed(proc.stdout, lambda state: state not in ("exited", "stopped", "dead"))

    def run_networks(self) -> dict[str, str]:
        """Networks hetflow made for gangs: name -> the run in its ``hetflow.run`` label."""
        proc = self._run(["network", "ls", "--filter", f"label={LABEL_RUN}", "--format", "json"], check=False)
        out: dict[str, str] = {}
        for n in json.loads(proc.stdout or "[]") or [] if proc.returncode == 0 else []:
            labels = n.get("labels") or n.get("Labels") or {}
            name = n.get("name") or n.get("Name")
            if name and isinstance(labels, dict) and LABEL_RUN in labels:
                out[str(name)] = str(labels[LABEL_RUN])
        return out

    def stop(self, names: Iterable[str], timeout: int = 10) -> None:
        """``podman stop``, and, while the run is watched, the wait (``STOP_SEEN``) for its
        followers to learn the exits: ``stop`` has returned once the containers are stopped, but
        an attached run ends a moment later, so a poll at once said them running (a step that
        exited 0 on SIGTERM with its outputs was recorded stopped, not succeeded: issue 37)."""
        names = list(names)
        if not names:
            return
        self._run(["stop", "--ignore", "-t", str(timeout), *names], check=False, timeout=timeout + 60)
        watch, deadline = self._watch, time.monotonic() + STOP_SEEN
        while watch is not None and watch.running(names) and time.monotonic() < deadline:
            time.sleep(0.02)

    def remove(self, names: Iterable[str], *, measure: Collection[str] = (), measured: Measured | None = None) -> None:
        """Remove the containers (and their cgroups); while a run is watched, in the
        background, in order with network removals (``exits.Later``).  For each name in
        ``measure``, what it used is read first and given to ``measured`` (then perhaps
        later, from that background thread)."""
        names = list(names)
        if not names:
            return
        if self._watch is not None:
            self._watch.forget(names)
        wanted = tuple(n for n in names if n in measure) if measured is not None else ()
        self._now_or_later(_Removal(tuple(names), wanted, measured))

    def _now_or_later(self, item: _Removal) -> None:
        if self._later is not None:
            self._later.put(item)
        else:
            self._removals([item])

    def _removals(self, batch: list[_Removal]) -> None:
        """One batch: read what the measured containers used (one ``inspect`` for all),
        remove every container (one ``rm``) and its cgroup, then the networks."""
        wanted = [(n, r.measured) for r in batch for n in r.measure if r.measured is not None]
        if wanted:
            entries = self._inspect_entries([n for n, _ in wanted])
            for n, measured in wanted:
                measured(n, self._usage_of(n, entries.get(n)))
        names = [n for r in batch for n in r.containers]
        if names:
            self._remove_now(names)
        for r in batch:
            if r.network:
                self._remove_network_now(r.network)

    def _remove_now(self, names: list[str]) -> None:
        self._run(["rm", "-f", "--ignore", *names], check=False)
        self._remove_cgroups(names)

    def _remove_cgroups(self, names: Iterable[str]) -> None:
        if self._cgroups is not None:
            for n in names:
                cgroups.remove(self._cgroups, n)

    def usage(self, name: str) -> Usage:
        """The image and run times from ``inspect``, peak memory and CPU time from the
        attempt's parent cgroup (absent when the container ran without one)."""
        return self._usage_of(name, self._inspect_entry(name))

    def _usage_of(self, name: str, entry: Mapping[str, Any] | None) -> Usage:
        found = usage_from_inspect(entry) if entry else UNKNOWN
        if self._cgroups is None:
            return found
        measured = cgroups.read_usage(self._cgroups, name)
        oom = True if found.oom_killed or measured.oom_kills else None
        return replace(found, peak_memory=measured.peak_memory, cpu_seconds=measured.cpu_seconds, oom_killed=oom)

    def watch(self, run_id: str, wake: Callable[[], None], *, new: bool = False) -> Callable[[], None] | None:
        """Call ``wake`` the moment a container of the run exits (``exits.ExitWatch``: each
        container's monitor followed through a pidfd), keep the run's containers known
        without ``ps``, and remove finished ones in the background; the stopper ends it
        all, waiting for the removals.  ``new``: the run has launched nothing, so no ``ps``."""
        if self._watch is not None:
            return None  # one run per engine at a time; a second watcher polls
        watch = ExitWatch(
            inspect=self._inspect_entry,
            wait_command=self._wait_command,
            wake=wake,
            env=self._env,
            unstarted=self._unstarted,
        )
        listed = {} if new else self.states(run_id)  # a resumed run's containers
        if not new:
            orphans.reap_unlisted(f"hf-{run_id}-", listed)  # monitors of ones podman lost wait for ever
        for name, st in listed.items():
            entry = self._inspect_entry(name) if st.running else None
            if orphans.reap_unstarted(entry):  # settle_launches left no `podman run` to start it
                watch.known_exit(name, st.labels, NEVER_STARTED, None)
            elif st.running:
                pid = ((entry or {}).get("State") or {}).get("ConmonPid")
                watch.follow(name, st.labels, int(pid) if pid else None)
            else:
                watch.known_exit(name, st.labels, st.status, st.exit_code if st.exit_code is not None else 255)
        self._watch, self._watch_run = watch, run_id
        self._later = Batches(f"remove-{run_id}", self._removals)

        def stop() -> None:
            # env files (values) and secrets go before hetflow does: quick steps end sooner
            # than a dropper's first question (a daemon thread dies with hetflow)
            self._closing.set()
            for dropper in self._drops:
                dropper.join(timeout=ENV_FILE_WAIT)
            self._drops, self._closing = [], threading.Event()
            watch.close()
            later, self._later = self._later, None
            if later is not None:
                later.close()
            self._watch, self._watch_run = None, None

        return stop

    def _watching(self, run_id: str | None) -> ExitWatch | None:
        return self._watch if self._watch is not None and run_id == self._watch_run else None

    def settle_launches(self, names: Collection[str]) -> list[str]:
        """Wait out a killed executor's launches of ``names`` still in flight (``orphans``)."""

        def status(some: Collection[str]) -> dict[str, str]:
            return {
                n: str((e.get("State") or {}).get("Status", "")).lower()
                for n, e in self._inspect_entries([*some]).items()
            }

        return orphans.settle(self.binary, names, status)

    def _unstarted(self, name: str) -> bool:
        """Whether the container ``name`` was made but never started (its ``podman run`` is
        gone); if so, what it left running is ended (``orphans.reap_unstarted``)."""
        return orphans.reap_unstarted(self._inspect_entry(name))

    def _inspect_entry(self, name: str) -> Mapping[str, Any] | None:
        return self._inspect_entries([name]).get(name)

    def _inspect_entries(self, names: list[str]) -> dict[str, Mapping[str, Any]]:
        """``inspect`` entries by name; one the engine does not have is absent (podman then
        exits 125 but prints the others)."""
        proc = self._run(["inspect", "--type", "container", "--format", "json", *names], check=False)
        try:
            info = json.loads(proc.stdout or "[]")
        except json.JSONDecodeError:
            info = []
        entries = [e for e in info if isinstance(e, dict)] if isinstance(info, list) else []
        return {str(e.get("Name", "")).lstrip("/"): e for e in entries}

    def _wait_command(self, name: str, interval: str) -> list[str]:
        # podman's wait polls, every 250 ms unless told; docker's waits on its own events
        every = ["--interval", interval] if self.name == "podman" else []
        return [self.binary, *self._global, "wait", *every, name]


def _listed(ps_json: str, running: Callable[[str], bool]) -> dict[str, ContainerState]:
    """``ps --format json`` as states by name; ``running``: which state words are not over."""
    out: dict[str, ContainerState] = {}
    for c in json.loads(ps_json or "[]") or []:
        names = c.get("Names") or []
        name = names[0] if isinstance(names, list) and names else str(names)
        state = str(c.get("State", "")).lower()
        labels = c.get("Labels") or {}
        code = None if running(state) else int(c.get("ExitCode", 0))
        out[name] = ContainerState(name, code is None, code, state, labels if isinstance(labels, dict) else {})
    return out
