"""A local Slurm test cluster on this one machine, for tests and ``make demo-slurm``.

One munged (its own key and socket), one slurmctld, and one slurmd per fake node: every
slurmd is started with ``-N NAME`` and listens on its own port (``NodeName=... NodeHostname=
localhost Port=...``), which Debian's Slurm 22.05 allows.  Each node's fake GPUs are mknod'd
device nodes (inventory.fakegpus) in a folder of its own, ``BASE/dev/NODE``, named by gres.conf,
as a real node's /dev/nvidiaN are.  Exit codes need no accounting database: the backend's
job script writes them to files, and MinJobAge keeps finished jobs in squeue for a while.

    BASE/etc/slurm.conf, gres.conf   BASE/state, spool/NODE, log, run (pid files)
    BASE/munge/                      key, socket, pid, log
    BASE/dev/NODE/nvidiaN            fake GPUs        BASE/work   the backend's shared workdir

    python -m demo.slurm.cluster start|status|stop|bench [--base DIR]

The fake nodes and the slurm.conf and gres.conf describing them: demo/slurm/nodes.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from demo.slurm.nodes import (
    CGROUP_CONF,
    PARTITION,
    FakeNode,
    gres_conf,
    make_drm_gpus,
    mig_instances,
    slurm_conf,
)
from hetflow.config import hetflow_home
from hetflow.errors import EngineError
from hetflow.execute.backends.slurm import SlurmSettings
from hetflow.inventory.fakes.gpus import make_fake_gpus

INSTALL = "apt-get install -y slurm-wlm munge"
# Unix socket paths are limited to 108 bytes (unix(7)); slurmd's step sockets are
# SPOOL/NODE/NODE_JOBID.STEPID, about 45 bytes below BASE.
MAX_BASE = 60


DEFAULT_NODES = (
    FakeNode("hf-a100", "a100:2", features=("a100",)),
    FakeNode("hf-t4", "t4:1", features=("t4",)),
)


# the hetflow cluster file describing DEFAULT_NODES (node type = node name; the planner places on it)
CLUSTER_FILE = """apiVersion: hetflow/v1
kind: Cluster
name: local-slurm
bandwidth: 10Gbit/s
nodeTypes:
  - {name: hf-a100, count: 1, cores: 2, memory: 3Gi, price: 4.0,
     gpus: {model: NVIDIA A100-SXM4-40GB, count: 2, memory: 40Gi, computeCapability: "8.0"}}
  - {name: hf-t4, count: 1, cores: 2, memory: 3Gi, price: 0.8,
     gpus: {model: Tesla T4, count: 1, memory: 16Gi, computeCapability: "7.5"}}
"""


@dataclass(frozen=True)
class LocalSlurm:
    base: Path
    conf_path: Path
    nodes: tuple[FakeNode, ...]
    partition: str = PARTITION

    @property
    def env(self) -> dict[str, str]:
        """For Slurm's client commands: ``SLURM_CONF``."""
        return {"SLURM_CONF": str(self.conf_path)}

    @property
    def device_dir(self) -> str:
        return str(self.base / "dev" / "{node}")

    @property
    def workdir(self) -> Path:
        return self.base / "work"

    def settings(self, **changes: object) -> SlurmSettings:
        """SlurmSettings for this cluster; ``changes`` override fields."""
        s = SlurmSettings(
            partition=self.partition,
            device_dir=self.device_dir,
            workdir=str(self.workdir),
            slurm_conf=str(self.conf_path),
            stop_timeout=5,
            mig_devices={n.name: m for n in self.nodes if (m := mig_instances(self.base, n))},
        )
        return replace(s, **changes)  # type: ignore[arg-type]

    def stop(self) -> None:
        stop_cluster(self.base)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- processes ---------------------------------------------------------------------------


def _pid(path: Path, program: str) -> int | None:
    """The pid in a pid file, if that process is alive and is ``program``."""
    try:
        pid = int(path.read_text().split()[0])
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except (OSError, ValueError, IndexError):
        return None
    return pid if Path(cmd.decode(errors="replace")).name == program else None


def _pid_files(base: Path) -> list[tuple[Path, str]]:
    run = base / "run"
    files = [(p, "slurmd") for p in sorted(run.glob("slurmd-*.pid"))]
    return [*files, (run / "slurmctld.pid", "slurmctld"), (base / "munge" / "munged.pid", "munged")]


def _run(args: list[str], env: Mapping[str, str], *, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(args, capture_output=True, text=True, env=dict(env), timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EngineError(f"{args[0]}: {exc}") from None


def _tail(path: Path, n: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return "(no log)"


def _node_states(env: Mapping[str, str]) -> dict[str, str]:
    proc = _run(["sinfo", "--noheader", "--Node", "--format=%N %T"], env, timeout=10)
    if proc.returncode != 0:
        return {}
    return dict(line.split(None, 1) for line in proc.stdout.splitlines() if " " in line)


def cluster_running(base: Path) -> LocalSlurm | None:
    """The cluster under ``base`` if its daemons are up and slurmctld answers."""
    base = Path(base).resolve()
    meta = base / "nodes.json"
    if not meta.exists():
        return None
    nodes = tuple(FakeNode(**{**d, "features": tuple(d["features"])}) for d in json.loads(meta.read_text()))
    cluster = LocalSlurm(base, base / "etc" / "slurm.conf", nodes)
    if any(_pid(p, prog) is None for p, prog in _pid_files(base)):
        return None
    if len(list((base / "run").glob("slurmd-*.pid"))) != len(nodes):
        return None
    return cluster if _node_states({**os.environ, **cluster.env}) else None


def start_cluster(
    base: Path, nodes: Sequence[FakeNode] = DEFAULT_NODES, *, timeout: float = 60, cgroups: bool = False
) -> LocalSlurm:
    """Start (or find running) the cluster under ``base``; returns once every node is idle.
    ``cgroups``: with Slurm's cgroup plugins (``slurm_conf``; needs a writable cgroup v1)."""
    base = Path(base).resolve()
    nodes = tuple(nodes)
    running = cluster_running(base)
    if running is not None and running.nodes == nodes and (base / "etc" / "cgroup.conf").exists() == cgroups:
        return running
    missing = [p for p in ("munged", "slurmctld", "slurmd", "sinfo", "sbatch") if not shutil.which(p)]
    if missing:
        raise EngineError(f"Slurm is not installed here ({', '.join(missing)} not found): {INSTALL}")
    if os.geteuid() != 0:
        raise EngineError("the local Slurm test cluster runs slurmd as root and mknods fake GPUs: run it as root")
    if len(str(base)) > MAX_BASE:
        raise EngineError(f"{base} is too long for slurmd's Unix sockets; use a folder of at most {MAX_BASE} bytes")
    stop_cluster(base)
    shutil.rmtree(base / "state", ignore_errors=True)  # a fresh controller: no jobs, nodes from the conf
    for d in ("etc", "state", "run", "log", "munge", "work", *(f"spool/{n.name}" for n in nodes)):
        (base / d).mkdir(parents=True, exist_ok=True)
    for n in nodes:
        if n.gpus:
            make_fake_gpus(n.gpus, base / "dev" / n.name)
        if n.drm:
            make_drm_gpus(n, base / "dev" / n.name)
    ports = {"slurmctld": _free_port(), **{n.name: _free_port() for n in nodes}}
    conf = base / "etc" / "slurm.conf"
    conf.write_text(slurm_conf(base, nodes, ports, cgroups=cgroups))
    (base / "etc" / "cgroup.conf").unlink(missing_ok=True)
    if cgroups:
        (base / "etc" / "cgroup.conf").write_text(CGROUP_CONF)
    (base / "etc" / "gres.conf").write_text(gres_conf(base, nodes))
    (base / "nodes.json").write_text(json.dumps([asdict(n) for n in nodes]))
    cluster = LocalSlurm(base, conf, nodes)
    env = {**os.environ, **cluster.env}
    _start_munge(base, env)
    _daemon(["slurmctld", "-c", "-f", str(conf)], env, base / "log" / "slurmctld.log")
    for n in nodes:
        _daemon(["slurmd", "-f", str(conf), "-N", n.name], env, base / "log" / f"slurmd-{n.name}.log")
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = _node_states(env)
        up = [s for s in states.values() if s.rstrip("*~#") in ("idle", "mixed", "allocated")]
        # slurmd writes its pid file once it is ready to take jobs
        ready = all(_pid(base / "run" / f"slurmd-{n.name}.pid", "slurmd") for n in nodes)
        if len(states) == len(nodes) == len(up) and ready:
            return cluster
        time.sleep(0.3)
    stop_cluster(base)
    raise EngineError(
        f"the local Slurm cluster did not come up in {timeout:.0f}s (nodes: {states or 'no answer'}); "
        f"slurmctld.log: {_tail(base / 'log' / 'slurmctld.log')}"
    )


def _start_munge(base: Path, env: Mapping[str, str]) -> None:
    """A munged of our own (its own key and socket; slurm.conf's AuthInfo points at it).
    munged refuses root without --force; the folders must not be writable by others."""
    m = base / "munge"
    os.chmod(m, 0o755)  # the socket's folder: others need x (munged warns otherwise)
    key = m / "munge.key"
    if not key.exists():
        key.write_bytes(os.urandom(1024))
    os.chmod(key, 0o600)
    args = [
        "munged",
        "--force",
        f"--socket={m / 'munge.socket'}",
        f"--key-file={key}",
        f"--pid-file={m / 'munged.pid'}",
        f"--log-file={m / 'munged.log'}",
        f"--seed-file={m / 'munged.seed'}",
    ]
    proc = _run(args, env)
    if proc.returncode != 0:
        raise EngineError(f"munged did not start: {proc.stderr.strip() or _tail(m / 'munged.log')}")


def _daemon(args: list[str], env: Mapping[str, str], log: Path) -> None:
    """Slurm's daemons fork into the background themselves."""
    proc = _run(args, env)
    if proc.returncode != 0:
        raise EngineError(f"{args[0]} did not start: {proc.stderr.strip() or _tail(log)}")


def stop_cluster(base: Path, *, timeout: float = 20) -> None:
    """Cancel the cluster's jobs (their containers are stopped by the job scripts' traps),
    then end its daemons: only the processes named in its own pid files, and the nodes'
    slurmstepd processes, once they have told slurmctld their job's end (a slurmstepd whose
    slurmd was killed, and slurmctld after it, retries that for ever: seen half an hour
    after ``make test``)."""
    base = Path(base).resolve()
    conf = base / "etc" / "slurm.conf"
    if conf.exists() and _pid(base / "run" / "slurmctld.pid", "slurmctld"):
        env = {**os.environ, "SLURM_CONF": str(conf)}
        _run(["scancel", "--user", str(os.getuid())], env, timeout=15)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            active = _run(["squeue", "--noheader", "--states=PD,R,CG,CF,S", "--format=%i"], env, timeout=10)
            if active.returncode != 0 or not active.stdout.strip():
                break
            time.sleep(0.3)
        deadline = time.monotonic() + timeout
        while _stepds(base) and time.monotonic() < deadline:
            time.sleep(0.3)
    pids = [pid for path, prog in _pid_files(base) if (pid := _pid(path, prog))]
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
        time.sleep(0.1)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in _stepds(base):  # it ignores SIGTERM
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _stepds(base: Path) -> list[int]:
    """The cluster's slurmstepd processes: they work in a folder under ``base`` (its log folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):  # ended meanwhile, or not a process
            if (proc / "comm").read_text().strip() == "slurmstepd" and os.readlink(proc / "cwd").startswith(f"{base}/"):
                found.append(int(proc.name))
    return found


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m demo.slurm.cluster", description=__doc__)
    ap.add_argument("command", choices=["start", "status", "stop"])
    ap.add_argument("--base", type=Path, default=None, help="default: $HETFLOW_HOME/slurm-cluster")
    args = ap.parse_args(argv)
    base = args.base or hetflow_home() / "slurm-cluster"
    try:
        if args.command == "stop":
            stop_cluster(base)
            print(f"stopped the cluster under {base}")
            return 0
        if args.command == "status":
            cluster = cluster_running(base)
            if cluster is None:
                print(f"no cluster running under {base}")
                return 1
            print(_run(["sinfo", "--Node", "--format=%N %T %G %c %m"], {**os.environ, **cluster.env}).stdout, end="")
            return 0
        cluster = start_cluster(base)
        if args.command == "start":
            s = cluster.settings()
            print(f"export SLURM_CONF={cluster.conf_path}")
            print(f"# hetflow: backend slurm, workdir {s.workdir}, slurm device_dir {s.device_dir}, ")
            print(f"#          partition {s.partition}")
            return 0
        return 0
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
