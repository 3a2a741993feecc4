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

    python -m demo.slurm_cluster start|status|stop|bench [--base DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from hetflow.config import hetflow_home
from hetflow.errors import EngineError
from hetflow.execute.backends.slurm import SlurmSettings
from hetflow.execute.devices.migtable import MigInstance
from hetflow.execute.devices.migtable import mig_instances as mig_instances_of
from hetflow.inventory.fakegpus import make_fake_gpus, parse_fake_entries

INSTALL = "apt-get install -y slurm-wlm munge"
PARTITION = "hf"
# Unix socket paths are limited to 108 bytes (unix(7)); slurmd's step sockets are
# SPOOL/NODE/NODE_JOBID.STEPID, about 45 bytes below BASE.
MAX_BASE = 60


@dataclass(frozen=True)
class FakeNode:
    name: str
    gpus: str = ""  # HETFLOW_FAKE_GPUS syntax: "a100:2", "t4:1,l4:1"
    cpus: int = 2
    memory_mb: int = 4000
    features: tuple[str, ...] = ()
    # Sharing gres on every NVIDIA GPU of the node (gres.conf Count= per File=): ``shards``
    # per GPU (gres/shard: time-slicing) or ``mps`` per GPU (gres/mps: 100 by Slurm's convention).
    shards: int = 0
    mps: int = 0
    # AMD or Intel GPUs, as their DRM render nodes: "mi250x:2" with ``drm_vendor`` amd (then
    # BASE/dev/NODE/kfd too) or intel; gres type from the model, File= .../dri/renderD128...
    drm: str = ""
    drm_vendor: str = ""


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


# --- configuration ---------------------------------------------------------------------


# cgroup.conf(5) of a cluster started with ``cgroups``: each job's memory limit in its cgroup
# (cgroup v1, as this machine has; no swap limit: a machine without swap needs none) and
# devices left alone (the fake GPUs reach containers through podman's own device rules).
CGROUP_CONF = "CgroupPlugin=cgroup/v1\nConstrainRAMSpace=yes\nConstrainCores=no\nConstrainDevices=no\n"


def slurm_conf(base: Path, nodes: Sequence[FakeNode], ports: Mapping[str, int], *, cgroups: bool = False) -> str:
    """slurm.conf(5) for the cluster: cons_tres with gpu gres, no accounting; no cgroups, or
    (``cgroups``) proctrack/cgroup and task/cgroup, so a job's memory limit and scancel hold
    every process in its cgroup: the step's container too (its cgroup parent is the job's)."""
    lines = [
        "ClusterName=hetflow",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={ports['slurmctld']}",
        f"AuthType=auth/munge\nAuthInfo=socket={base / 'munge' / 'munge.socket'}\nCredType=cred/munge",
        "SlurmUser=root\nSlurmdUser=root",
        f"StateSaveLocation={base / 'state'}",
        f"SlurmdSpoolDir={base / 'spool' / '%n'}",
        f"SlurmctldPidFile={base / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={base / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={base / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={base / 'log' / 'slurmd-%n.log'}",
        # no cgroups by default: processes tracked through /proc, no task binding
        "ProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup"
        if cgroups
        else "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none",
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core_Memory\nGresTypes=gpu,shard,mps",
        "MpiDefault=none\nJobAcctGatherType=jobacct_gather/none",
        # No slurmdbd: sacct cannot answer; a human-readable record of ended jobs goes here.
        "AccountingStorageType=accounting_storage/none",
        f"JobCompType=jobcomp/filetxt\nJobCompLoc={base / 'log' / 'jobcomp.txt'}",
        # Ended jobs stay in squeue for 10 minutes; the backend's exit files outlive that.
        "MinJobAge=600",
        "KillWait=30",
        # Dependent jobs start on the main scheduler's pass: every second, not every minute.
        "SchedulerParameters=sched_interval=1",
        "ReturnToService=2",
        # Trust the node lines whatever the machine has (CI runners differ in cores).
        "SlurmdParameters=config_overrides",
        "DefMemPerCPU=100",
    ]
    for n in nodes:
        types = _gpu_types(n) + _drm_types(n) + _mig_types(n)
        nvidia = sum(count for _, count in _gpu_types(n))
        shared = nvidia + sum(count for _, count in _drm_types(n))  # shards: on any vendor's GPU
        gres = ",".join(
            [f"gpu:{model}:{count}" for model, count in types]
            + ([f"shard:{n.shards * shared}"] if n.shards and shared else [])
            + ([f"mps:{n.mps * nvidia}"] if n.mps and nvidia else [])
        )
        lines.append(
            f"NodeName={n.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={ports[n.name]} "
            f"CPUs={n.cpus} RealMemory={n.memory_mb}"
            + (f" Gres={gres}" if gres else "")
            + (f" Feature={','.join(n.features)}" if n.features else "")
            + " State=UNKNOWN"
        )
    lines.append(f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


def gres_conf(base: Path, nodes: Sequence[FakeNode]) -> str:
    """gres.conf(5): each node's fake device nodes, one line per GPU type, in index order."""
    lines = []
    for n in nodes:
        index = 0
        for model, count in _gpu_types(n):
            # one folder per File= (slurmd splits the path at its last "/"), a hostlist range
            last = index + count - 1
            files = base / "dev" / n.name / (f"nvidia{index}" if count == 1 else f"nvidia[{index}-{last}]")
            lines.append(f"NodeName={n.name} Name=gpu Type={model} File={files}")
            index += count
        # a shared GPU: Count= shard / mps gres on each GPU's own File= (gres.conf(5))
        for gpu in range(index):
            for name, count in (("shard", n.shards), ("mps", n.mps)):
                if count:
                    gpu_file = base / "dev" / n.name / f"nvidia{gpu}"
                    lines.append(f"NodeName={n.name} Name={name} Count={count} File={gpu_file}")
        minor = 128
        for model, count in _drm_types(n):
            dri = base / "dev" / n.name / "dri"
            files = dri / (f"renderD{minor}" if count == 1 else f"renderD[{minor}-{minor + count - 1}]")
            lines.append(f"NodeName={n.name} Name=gpu Type={model} File={files}")
            minor += count
        for k in range(minor - 128):  # an AMD or Intel GPU shared by time-slicing: shards on its render node
            if n.shards:
                render = base / "dev" / n.name / "dri" / f"renderD{128 + k}"
                lines.append(f"NodeName={n.name} Name=shard Count={n.shards} File={render}")
        # a GPU in MIG mode: one record per instance, its GPU's node and its two nvidia-caps
        # nodes (gres.conf(5) MultipleFiles), typed by profile as AutoDetect=nvml names them
        for m in mig_instances(base, n):
            lines.append(f"NodeName={n.name} Name=gpu Type={m.profile} MultipleFiles={','.join(m.files)}")
    return "\n".join(lines) + "\n"


def _drm_types(node: FakeNode) -> list[tuple[str, int]]:
    """The node's AMD or Intel (gres type, count): its ``drm`` spec."""
    return [(model, int(count)) for model, _, count in (p.partition(":") for p in node.drm.split(",") if p)]


def make_drm_gpus(node: FakeNode, folder: Path) -> None:
    """Fake AMD/Intel GPUs: DRM render nodes (char 226, minors 128...) under ``folder/dri``
    and, for AMD, ``folder/kfd`` (mknod'd; no driver behind them)."""
    dri = folder / "dri"
    dri.mkdir(parents=True, exist_ok=True)
    total = sum(count for _, count in _drm_types(node))
    for i in range(total):
        path = dri / f"renderD{128 + i}"
        if not path.exists():
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(226, 128 + i))
    if node.drm_vendor == "amd" and not (folder / "kfd").exists():
        os.mknod(folder / "kfd", 0o666 | stat.S_IFCHR, os.makedev(238, 0))


def mig_instances(base: Path, node: FakeNode) -> tuple[MigInstance, ...]:
    """The node's fake MIG instances (made under ``base/dev/NODE`` if missing), in gres
    order: after the node's whole GPUs."""
    if "mig=" not in node.gpus:
        return ()
    gpus, _ = make_fake_gpus(node.gpus, base / "dev" / node.name)
    return mig_instances_of(gpus, first_index=sum(count for _, count in _gpu_types(node)))


def _mig_types(node: FakeNode) -> list[tuple[str, int]]:
    """The node's MIG gres (profile, count), in layout order."""
    counts: dict[str, int] = {}
    for e in parse_fake_entries(node.gpus):
        for profile in e.mig * e.count:
            counts[profile] = counts.get(profile, 0) + 1
    return list(counts.items())


def _gpu_types(node: FakeNode) -> list[tuple[str, int]]:
    """The node's whole-GPU (gres type, count) in device order (a GPU in MIG mode is its
    instances: ``_mig_types``); neighbours of one type merge."""
    out: list[tuple[str, int]] = []
    for model, count in ((e.model, e.count) for e in parse_fake_entries(node.gpus) if not e.mig):
        if out and out[-1][0] == model:
            out[-1] = (model, out[-1][1] + count)
        else:
            out.append((model, count))
    return out


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
    ap = argparse.ArgumentParser(prog="python -m demo.slurm_cluster", description=__doc__)
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
