"""MPI and torchrun-style gangs as real, hardened podman containers.

Every replica runs as UID 1000:1000 (no passwd entry in the image: podman adds one)
with no capabilities, no-new-privileges, a read-only root and a tmpfs /tmp.  The gang's
SSH keys and configs come from hetflow.execute.gang.mpilaunch, bind-mounted read-only."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hetflow.config import engine_env, find_engine
from hetflow.execute.gang.mpicommands import launcher_command, mpi_env, worker_command
from hetflow.execute.gang.mpilaunch import (
    MPI_MOUNT,
    MpiPeer,
    write_mpi_files,
)
from tests.integration.hfkit import free_port

pytestmark = pytest.mark.integration

HARDENED = (
    "--cap-drop=all",
    "--security-opt=no-new-privileges",
    "--read-only",
    "--user=1000:1000",
    "--tmpfs=/tmp:rw,nosuid,nodev,mode=1777",
)


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [find_engine(), *args], env=engine_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and done.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture
def gang() -> Iterator[str]:
    """A unique name prefix; every container and network with it is removed after."""
    prefix = f"hf-gang-{uuid.uuid4().hex[:8]}"
    try:
        yield prefix
    finally:
        names = podman("ps", "-a", "--filter", f"name={prefix}", "--format", "{{.Names}}", check=False).stdout.split()
        if names:
            podman("rm", "-f", "-t", "0", *names, check=False)
        podman("network", "rm", "-f", prefix, check=False)


def _env_flags(env: dict[str, str]) -> list[str]:
    return [f"--env={k}={v}" for k, v in env.items()]


def start(name: str, image: str, network: str, env: dict[str, str], command: Sequence[str], mpi_dir: Path) -> None:
    podman(
        "run", "-d", "--name", name, "--hostname", name, f"--network={network}", *HARDENED,
        f"--volume={mpi_dir}:{MPI_MOUNT}:ro", *_env_flags(env), image, *command,
    )  # fmt: skip


def wait_exit(name: str, timeout: float = 180) -> tuple[int, str]:
    code = podman("wait", name, timeout=timeout).stdout.strip()
    logs = podman("logs", name)
    return int(code), logs.stdout + logs.stderr


def _ok_lines(output: str) -> set[str]:
    return {line.split(" on ")[0] for line in output.splitlines() if line.startswith("rank ") and line.endswith(" ok")}


def run_mpi_gang(
    tmp_path: Path, image: str, prefix: str, network: str, peers: list[MpiPeer], owner: tuple[int, int] | None
) -> tuple[int, str]:
    files = write_mpi_files(tmp_path / "mpi", peers, owner=owner)
    size = sum(peer.slots for peer in peers)
    for peer in peers[1:]:
        start(
            f"{prefix}-{peer.rank}",
            image,
            network,
            mpi_env(peer, size, peers),
            worker_command(files, peer),
            tmp_path / "mpi",
        )
    launcher = launcher_command(files, ["python3", "/app/gang/allreduce.py"], size, timeout=60)
    start(f"{prefix}-0", image, network, mpi_env(peers[0], size, peers), launcher, tmp_path / "mpi")
    return wait_exit(f"{prefix}-0")


@pytest.mark.parametrize("slots", [1, 2])
def test_mpirun_allreduce_across_two_containers_on_an_internal_network(
    tmp_path: Path, mpi_image: str, gang: str, slots: int
) -> None:
    """slots=2: two ranks per container too (shared memory within one, TCP between)."""
    podman("network", "create", "--internal", gang)
    peers = [MpiPeer(0, f"{gang}-0", slots=slots), MpiPeer(1, f"{gang}-1", slots=slots)]
    code, output = run_mpi_gang(tmp_path, mpi_image, gang, gang, peers, owner=None)
    size = 2 * slots
    assert code == 0, output
    assert _ok_lines(output) == {f"rank {r}/{size}" for r in range(size)}, output
    # the ranks really ran in different containers, rank order by host
    hosts = [line.split(" on ")[1].split(":")[0] for line in sorted(output.splitlines()) if line.startswith("rank ")]
    assert hosts == [f"{gang}-{r // slots}" for r in range(size)], output


def _free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


def test_mpirun_allreduce_on_the_host_network_with_two_ports_on_loopback(
    tmp_path: Path, mpi_image: str, gang: str
) -> None:
    """How a Slurm or Ray backend runs a gang on a one-machine test cluster: every
    replica on the host's network, all at 127.0.0.1, one sshd port each; the files
    belong to the containers' UID (0600 keys)."""
    ports = _free_ports(2)
    peers = [MpiPeer(0, "127.0.0.1", ports[0]), MpiPeer(1, "127.0.0.1", ports[1])]
    code, output = run_mpi_gang(tmp_path, mpi_image, gang, "host", peers, owner=(1000, 1000))
    assert code == 0, output
    assert _ok_lines(output) == {"rank 0/2", "rank 1/2"}, output
    assert (tmp_path / "mpi" / "id_ed25519").stat().st_mode & 0o777 == 0o600


def test_torchrun_style_allreduce_across_two_containers(tmp_path: Path, mpi_image: str, gang: str) -> None:
    podman("network", "create", "--internal", gang)
    size = 2
    for rank in reversed(range(size)):  # the worker first: it must retry until rank 0 listens
        env = {
            "MASTER_ADDR": f"{gang}-0",
            "MASTER_PORT": "29500",
            "RANK": str(rank),
            "WORLD_SIZE": str(size),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "NODE_RANK": str(rank),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        podman(
            "run", "-d", "--name", f"{gang}-{rank}", "--hostname", f"{gang}-{rank}", f"--network={gang}",
            *HARDENED, *_env_flags(env), mpi_image, "python3", "/app/gang/torch_allreduce.py",
        )  # fmt: skip
    results = [wait_exit(f"{gang}-{rank}") for rank in range(size)]
    output = "".join(out for _, out in results)
    assert [code for code, _ in results] == [0, 0], output
    assert _ok_lines(output) == {"rank 0/2", "rank 1/2"}, output


def test_an_internal_gang_network_has_no_route_out_but_resolves_replica_names(mpi_image: str, gang: str) -> None:
    podman("network", "create", "--internal", gang)
    podman("run", "-d", "--name", f"{gang}-0", f"--network={gang}", *HARDENED, mpi_image, "sleep", "60")
    probe = (
        "import socket\n"
        "routes = [l.split()[1] for l in open('/proc/net/route').read().splitlines()[1:]]\n"
        "print('default' if '00000000' in routes else 'no-default')\n"
        f"print(socket.gethostbyname('{gang}-0'))\n"
    )
    out = podman("run", "--rm", f"--network={gang}", *HARDENED, mpi_image, "python3", "-c", probe).stdout.split()
    assert out[0] == "no-default"
    ip = podman("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", f"{gang}-0")
    assert out[1] == ip.stdout.strip()
