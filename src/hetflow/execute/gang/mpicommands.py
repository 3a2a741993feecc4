"""The commands and environment of an ``mpirun``-launched gang's replicas (``mpilaunch``
writes their files): Open MPI's settings for hardened containers (``mca_params``), each
replica's variables (``mpi_env``), what a worker runs (its sshd in the foreground) and what
replica 0 runs (its sshd, a wait until every peer's sshd lets the gang's key in, then
``mpirun``).  Pure: argument lists and dictionaries, no engine calls."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from hetflow.execute.gang.mpilaunch import (
    MPI_MOUNT,
    SSH_CONFIG,
    SSHD,
    SSHD_LOG,
    MpiError,
    MpiFiles,
    MpiPeer,
    check_peers,
    is_loopback,
    session_env,
)

__all__ = ["launcher_command", "mca_params", "mpi_env", "worker_command"]


def mca_params(peers: Sequence[MpiPeer], mount: str = MPI_MOUNT) -> dict[str, str]:
    """Open MPI settings for a non-root, no-ptrace, read-only container gang."""
    params = {
        # mpirun starts an orted on each peer with the gang's ssh_config.
        "plm_rsh_agent": f"ssh -F {mount}/{SSH_CONFIG}",
        "plm_rsh_no_tree_spawn": "1",
        # TCP between replicas, shared memory within one; CMA needs ptrace (no caps).
        "pml": "ob1",
        "btl": "self,vader,tcp",
        "btl_vader_single_copy_mechanism": "none",
        # Session folders on the tmpfs; no binding (cpusets belong to the engine).
        "orte_tmpdir_base": "/tmp",
        "hwloc_base_binding_policy": "none",
        "rmaps_base_oversubscribe": "0",
    }
    if all(is_loopback(p.host) for p in check_peers(peers)):
        # Every peer on this machine's loopback (a --network host gang on one node):
        # Open MPI leaves loopback out by default.
        params |= {"oob_tcp_if_include": "lo", "btl_tcp_if_include": "lo"}
    else:
        params |= {"btl_tcp_if_exclude": "lo,docker0"}
    return params


def mpi_env(peer: MpiPeer, world_size: int, peers: Sequence[MpiPeer] = (), mount: str = MPI_MOUNT) -> dict[str, str]:
    """Environment for every replica of the gang (``peers`` defaults to ``[peer]``,
    which decides only whether the gang is all-loopback)."""
    if world_size < 1:
        raise MpiError(f"world_size must be at least 1, not {world_size}")
    env = {f"OMPI_MCA_{k}": v for k, v in mca_params(peers or [peer], mount).items()}
    env |= session_env()
    env |= {
        "HETFLOW_MPI_RANK": str(peer.rank),
        "HETFLOW_MPI_WORLD_SIZE": str(world_size),
        "HETFLOW_MPI_DIR": mount,
    }
    return env


def _sshd(files: MpiFiles, peer: MpiPeer, foreground: bool) -> list[str]:
    args = [SSHD, "-f", files.sshd_config, "-p", str(peer.port)]
    return [*args, "-D", "-e"] if foreground else [*args, "-E", SSHD_LOG]


def worker_command(files: MpiFiles, peer: MpiPeer) -> list[str]:
    """What replica ``peer.rank`` (1..n-1) runs: the gang's sshd in the foreground, as
    the container's UID, logging to stderr; the runner stops it when the launcher ends."""
    if peer not in files.peers:
        raise MpiError(f"peer {peer} is not one of this gang's peers")
    return _sshd(files, peer, foreground=True)


_LAUNCHER = """\
set -u
{sshd} || {{ echo "hetflow-mpi: sshd did not start:" >&2; cat {log} >&2; exit 1; }}
deadline=$(( $(date +%s) + {timeout} ))
for alias in {aliases}; do
  until ssh -F {ssh_config} -o ConnectTimeout=3 "$alias" true 2>/tmp/hetflow-mpi-ssh.err; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "hetflow-mpi: $alias did not answer ssh within {timeout}s:" >&2
      cat /tmp/hetflow-mpi-ssh.err >&2
      exit 1
    fi
    sleep 0.5
  done
done
exec {mpirun} "$@"
"""


def launcher_command(
    files: MpiFiles,
    user_command: Sequence[str],
    world_size: int,
    *,
    export: Sequence[str] = (),
    timeout: int = 120,
) -> list[str]:
    """What replica 0 runs: its own sshd (rank 0's slots are launched over ssh too),
    a wait of up to ``timeout`` seconds until every peer's sshd lets the gang's key
    in, then ``mpirun --hostfile ... -np world_size user_command`` with the MCA
    settings on its command line (so every orted gets them).  ``export`` names
    variables of replica 0's environment to pass to every rank (``mpirun -x``)."""
    if not user_command:
        raise MpiError("the MPI launcher needs a command to run")
    if not 1 <= world_size <= files.slots:
        raise MpiError(
            f"world_size {world_size} does not fit the gang's {files.slots} slots "
            f"({len(files.peers)} peers); give the peers more slots"
        )
    mpirun = ["mpirun", "--hostfile", files.hostfile, "-np", str(world_size)]
    for key, value in mca_params(files.peers, files.mount).items():
        mpirun += ["--mca", key, value]
    for name in export:
        mpirun += ["-x", name]
    script = _LAUNCHER.format(
        sshd=shlex.join(_sshd(files, files.peers[0], foreground=False)),
        log=SSHD_LOG,
        timeout=int(timeout),
        aliases=" ".join(p.alias for p in files.peers),
        ssh_config=files.ssh_config,
        mpirun=shlex.join(mpirun),
    )
    return ["/bin/sh", "-c", script, "hetflow-mpi-launcher", *user_command]
