"""Which OCI runtime podman starts hetflow's containers with: runc or crun.

``HETFLOW_OCI_RUNTIME`` says which (read like ``HETFLOW_ENGINE``, once per engine):

    auto (default)  crun when it is installed, a probe container starts under it with
                    hetflow's flags, and it started faster than runc in that probe; else runc
    runc | crun     that one, no probe (absent: refused, naming the variable)
    /path/to/rt     an OCI runtime binary podman can drive

The probe starts a few ``true`` containers under each runtime, alternately, with the hardening
every step gets (``engine.run_args``: read-only root, no capabilities, no-new-privileges,
seccomp, the submitter's UID:GID, CPU and memory limits, tmpfs /tmp, no network) on a root made
of the host's read-only /usr (``--rootfs``: no image needed), and keeps the fastest start of
each.  Its answer is cached in ``$XDG_CACHE_HOME/hetflow/oci-runtime.json`` (``~/.cache``)
under a fingerprint of the podman, crun and runc binaries, hetflow's containers.conf and the
cgroup layout, so it runs once per machine state (whatever HETFLOW_HOME), never per step;
removing that file asks for a new probe.  crun 1.8 refuses a hybrid cgroup layout whose cgroup v2 tree holds a
controller (MACHINE.md): the probe sees that refusal, and auto stays on runc, saying why.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hetflow.config import submitter
from hetflow.errors import EngineError
from hetflow.execute.engine import ContainerSpec, Mount, run_args

VARIABLE = "HETFLOW_OCI_RUNTIME"
AUTO = "auto"
KNOWN = ("runc", "crun")
CACHE_FILE = "oci-runtime.json"
CACHE_KEEP = 8
PROBE_ROUNDS = 4  # starts under each runtime, alternating; the fastest of each is compared
PROBE_TIMEOUT = 60.0  # seconds for one probe container
_HOST_DIRS = ("bin", "lib", "lib64", "sbin")  # beside /usr: links into it (merged /usr) or bound read-only
_CONTROLLERS = Path("/sys/fs/cgroup/unified/cgroup.controllers")  # what crun checks on a hybrid layout


@dataclass(frozen=True)
class RuntimeChoice:
    """The runtime podman is told to use (``--runtime NAME``) and why; ``probe_ms`` holds
    the fastest probe start of each runtime that started one (milliseconds)."""

    name: str  # runc, crun, or a path
    version: str  # "1.8.1", or "" when unknown
    reason: str
    probe_ms: Mapping[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for ``hetflow nodes``: ``crun 1.8.1 (faster start than runc here: ...)``."""
        shown = f"{self.name} {self.version}" if self.version else self.name
        return f"{shown} ({self.reason})"


@dataclass(frozen=True)
class ProbeResult:
    """One runtime's probe: its fastest start in seconds, or why it could not start."""

    seconds: float | None
    error: str = ""


Which = Callable[[str], str | None]
Probe = Callable[[Sequence[str]], dict[str, ProbeResult]]  # runtimes -> their results
Version = Callable[[str], str]


def setting(env: Mapping[str, str]) -> str:
    """The value asked for (``auto`` when unset or empty)."""
    return (env.get(VARIABLE) or AUTO).strip() or AUTO


def check_setting(env: Mapping[str, str], which: Which) -> str | None:
    """The runtime a forced setting names, as podman's ``--runtime`` takes it (a name or a
    path); None for auto.  A runtime that is not there is refused, naming the variable."""
    wanted = setting(env)
    if wanted == AUTO:
        return None
    path = which(wanted)
    if path is None:
        install = f" (apt-get install -y {wanted})" if wanted in KNOWN else ""
        raise EngineError(
            f"{VARIABLE}={wanted}: no such OCI runtime on PATH{install}; give auto, runc, crun or the path of an"
            " installed OCI runtime, or unset it to let hetflow choose"
        )
    return wanted if wanted in KNOWN else path


def choose(
    env: Mapping[str, str],
    cache: Path | None,
    *,
    which: Which,
    probe: Probe,
    version: Version,
    fingerprint: str = "",
) -> RuntimeChoice:
    """The runtime for this machine: a forced one as given; auto from the cached probe when
    its fingerprint still matches, else from a new probe (written to ``cache``)."""
    forced = check_setting(env, which)
    if forced is not None:
        return RuntimeChoice(forced, version(forced), f"{VARIABLE}={setting(env)}")
    if which("crun") is None:
        return RuntimeChoice("runc", version("runc"), "crun not installed")
    cached = _read_cache(cache, fingerprint)
    if cached is not None:
        return cached
    found = decide(probe(KNOWN), version)
    _write_cache(cache, fingerprint, found)
    return found


def decide(results: Mapping[str, ProbeResult], version: Version) -> RuntimeChoice:
    """crun where its probe started and was not slower than runc's; runc otherwise."""
    crun, runc = results.get("crun", ProbeResult(None, "not probed")), results.get("runc", ProbeResult(None))
    ms = {k: round(r.seconds * 1000, 1) for k, r in results.items() if r.seconds is not None}
    crun_v = version("crun")
    if crun.seconds is None:
        return RuntimeChoice(
            "runc", version("runc"), f"crun {crun_v} could not start a probe container: {crun.error}", ms
        )
    if runc.seconds is None:
        return RuntimeChoice("crun", crun_v, f"runc could not start a probe container: {runc.error}", ms)
    if crun.seconds <= runc.seconds:
        return RuntimeChoice(
            "crun", crun_v, f"faster start than runc here: {ms['crun']:.0f} ms vs {ms['runc']:.0f} ms", ms
        )
    return RuntimeChoice(
        "runc", version("runc"), f"faster start than crun {crun_v} here: {ms['runc']:.0f} ms vs {ms['crun']:.0f} ms", ms
    )


def cache_dir(env: Mapping[str, str]) -> Path:
    """Where the probe's answers live: a fact about this machine, not about one state
    directory, so ``$XDG_CACHE_HOME/hetflow`` (``~/.cache/hetflow``), shared by every HETFLOW_HOME."""
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "hetflow"


def _read_all(cache: Path) -> dict[str, object]:
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # absent or unreadable: probe again
    return data if isinstance(data, dict) else {}


def _read_cache(cache: Path | None, fingerprint: str) -> RuntimeChoice | None:
    if cache is None:
        return None
    c = _read_all(cache).get(fingerprint)
    if not isinstance(c, dict):
        return None
    try:
        return RuntimeChoice(str(c["name"]), str(c["version"]), str(c["reason"]), dict(c.get("probe_ms") or {}))
    except (KeyError, TypeError, ValueError):
        return None  # written by another hetflow: probe again


def _write_cache(cache: Path | None, fingerprint: str, found: RuntimeChoice) -> None:
    """Add one answer (the last ``CACHE_KEEP`` machine states are kept: a machine whose
    cgroup layout changes back and forth probes each once)."""
    if cache is None:
        return
    kept = {k: v for k, v in _read_all(cache).items() if k != fingerprint}
    kept = dict(list(kept.items())[-(CACHE_KEEP - 1) :]) if CACHE_KEEP > 1 else {}
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        part = cache.with_name(f"{cache.name}.{os.getpid()}")
        part.write_text(json.dumps({**kept, fingerprint: asdict(found)}), encoding="utf-8")
        part.replace(cache)  # whole or not at all: two hetflows may probe at once
    except OSError:
        pass  # a cache that cannot be written costs a probe next time, nothing else


# --- the real machine ---------------------------------------------------------------------


def which_on(env: Mapping[str, str]) -> Which:
    def which(name: str) -> str | None:
        if os.sep in name:
            return name if os.access(name, os.X_OK) and Path(name).is_file() else None
        return shutil.which(name, path=env.get("PATH"))

    return which


def runtime_version(which: Which) -> Version:
    def version(name: str) -> str:
        path = which(name)
        if path is None:
            return ""
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""
        words = out.splitlines()[0].split() if out.strip() else []
        return words[2] if len(words) >= 3 and words[1] == "version" else ""

    return version


def fingerprint(podman: str, which: Which, conf: str) -> str:
    """What the probe's answer depends on: the binaries, hetflow's containers.conf, the
    cgroup mounts and crun's hybrid-layout check."""
    parts = []
    for path in (podman, which("crun"), which("runc"), conf):
        try:
            st = os.stat(path) if path else None
            parts.append(f"{path}:{st.st_size}:{st.st_mtime_ns}" if st else f"{path}:-")
        except OSError:
            parts.append(f"{path}:-")
    for f in (Path("/proc/self/mounts"), _CONTROLLERS):
        try:
            text = f.read_text()
        except OSError:
            text = ""
        parts.append("\n".join(line for line in text.splitlines() if "cgroup" in line or f == _CONTROLLERS))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def probe_root(cache: Path) -> tuple[Path, tuple[Mount, ...]]:
    """An empty root for ``--rootfs`` with the host's /usr bound read-only (and /bin, /lib, ...
    as links into it on a merged-/usr host, bound read-only otherwise)."""
    root = cache / "oci-probe-root"
    mounts = [Mount("/usr", "/usr")]
    (root / "usr").mkdir(parents=True, exist_ok=True)
    for d in _HOST_DIRS:
        host, mine = Path("/") / d, root / d
        if host.is_symlink():
            if not mine.is_symlink() and not mine.exists():
                mine.symlink_to(os.readlink(host))
        elif host.is_dir():
            mine.mkdir(exist_ok=True)
            mounts.append(Mount(str(host), f"/{d}"))
    return root, tuple(mounts)


def probe_command(podman: Sequence[str], runtime: str, root: Path, mounts: tuple[Mount, ...], n: int) -> list[str]:
    """``podman --runtime RUNTIME run --rm`` of ``true`` with every step's hardening, on ``root``."""
    uid, gid = submitter()
    spec = ContainerSpec(
        name=f"hetflow-oci-probe-{runtime.rsplit('/', 1)[-1]}-{os.getpid()}-{n}",
        image=str(root),
        command=(shutil.which("true") or "/bin/true",),
        user=f"{uid}:{gid}",
        labels={},
        env={},
        mounts=mounts,
        cpus=1,
        memory=64 * 2**20,
        tmpfs_size="1m",
    )
    args = run_args(spec, attached=True)
    at = len(args) - len(spec.command) - 1  # the image's place: --rootfs ROOT instead
    return [*podman, "--runtime", runtime, *args[:at], "--rm", "--rootfs", *args[at:]]


def podman_probe(podman: Sequence[str], env: Mapping[str, str], cache: Path) -> Probe:
    """Start ``PROBE_ROUNDS`` probe containers under each runtime, alternating; the fastest
    start of each (a loaded machine only ever adds time), or the first refusal."""

    def probe(runtimes: Sequence[str]) -> dict[str, ProbeResult]:
        try:
            root, mounts = probe_root(cache)
        except OSError as exc:  # no writable cache directory: no probe, and auto stays on runc
            return {rt: ProbeResult(None, f"cannot make the probe's root: {exc}") for rt in runtimes}
        best: dict[str, float] = {}
        errors: dict[str, str] = {}
        for n in range(PROBE_ROUNDS):
            if errors and all(rt in best or rt in errors for rt in runtimes):
                break  # one refused: nothing left to compare, the others are known to work
            for rt in runtimes:
                if rt in errors:
                    continue
                cmd = probe_command(podman, rt, root, mounts, n)
                t0 = time.perf_counter()
                try:
                    proc = subprocess.run(
                        cmd, capture_output=True, text=True, env=dict(env), timeout=PROBE_TIMEOUT, check=False
                    )
                except (OSError, subprocess.TimeoutExpired) as exc:
                    errors[rt] = f"{type(exc).__name__}: {exc}"
                    continue
                took = time.perf_counter() - t0
                if proc.returncode != 0:
                    lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()
                    errors[rt] = lines[-1].removeprefix("Error: ")
                    # a container the runtime refused stays "created" despite --rm
                    subprocess.run([*podman, "rm", "-f", "--ignore", cmd[cmd.index("--name") + 1]], env=dict(env),
                                   capture_output=True, timeout=PROBE_TIMEOUT, check=False)  # fmt: skip
                else:
                    best[rt] = min(took, best.get(rt, took))
        return {rt: ProbeResult(None if rt in errors else best.get(rt), errors.get(rt, "")) for rt in runtimes}

    return probe


def engine_choice(podman: Sequence[str], env: Mapping[str, str], conf: str) -> RuntimeChoice:
    """The choice for a podman engine (``podman``: its binary and global arguments; ``env``:
    the engine's environment), probing at most once per machine state."""
    which, cache = which_on(env), cache_dir(env)
    return choose(
        env,
        cache / CACHE_FILE,
        which=which,
        probe=podman_probe(podman, env, cache),
        version=runtime_version(which),
        fingerprint=fingerprint(podman[0], which, conf),
    )
