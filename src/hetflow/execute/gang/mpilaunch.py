"""What an ``mpirun``-launched gang needs, as files and commands; no engine calls here.

A ``launcher: mpi`` gang is N replicas started together, the way kubeflow's
mpi-operator v2 runs MPI: every replica runs an unprivileged sshd on its peer's port,
and replica 0 (the launcher) waits until every sshd answers, then runs ``mpirun`` over
ssh with a per-gang key.  The runner calls:

    files = write_mpi_files(run_dir / "mpi", peers, owner=(1000, 1000))
    # bind-mount files.directory read-only at MPI_MOUNT in every replica, set mpi_env()
    replica 0:    launcher_command(files, ["python3", "/app/gang/allreduce.py"], world_size)
    replica 1..:  worker_command(files, peers[i])
    # the gang ends when replica 0 exits; the runner then stops the workers

Every host in the hostfile is an ssh alias (``hetflow-rank-R``) that the generated
ssh_config maps to the peer's host and port, so peers may share one address (a
``--network host`` gang on one machine uses 127.0.0.1 and one port per peer).  The
aliases never resolve, so Open MPI treats every entry as remote and starts an orted on
each over ssh, the launcher's own sshd included.

Hardened containers work: a non-root UID with no passwd entry of its own (podman adds
one to /etc/passwd), no capabilities, no-new-privileges, a read-only root and a tmpfs
/tmp.  sshd runs as that UID (no privilege separation, no PAM, StrictModes off), and
Open MPI's shared-memory transport is told not to use CMA (it needs ptrace).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hetflow.errors import HetflowError
from hetflow.execute.engine import Mount

__all__ = [
    "MPI_MOUNT",
    "MpiError",
    "MpiFiles",
    "MpiPeer",
    "check_peers",
    "is_loopback",
    "mpi_folder",
    "placeholder_host",
    "resolve_hosts",
    "write_mpi_files",
]

MPI_MOUNT = "/etc/hetflow/mpi"
# sshd run as root always separates privileges: it chroots into this (empty, root-owned)
# directory and changes user, so a root gang's replicas need it and these capabilities
# (all three in Docker's default set); an unprivileged sshd needs neither.
PRIVSEP_DIR = "/run/sshd"
ROOT_SSHD_CAPS = ("SYS_CHROOT", "SETUID", "SETGID")
DEFAULT_PORT = 2222
ALIAS_PREFIX = "hetflow-rank-"
SSHD = "/usr/sbin/sshd"
SSHD_PID = "/tmp/hetflow-mpi-sshd.pid"
SSHD_LOG = "/tmp/hetflow-mpi-sshd.log"
KEY_COMMENT = "hetflow-mpi-gang"

# File names inside the MPI folder (host side) and MPI_MOUNT (container side).
IDENTITY = "id_ed25519"
HOST_KEY = "ssh_host_ed25519_key"
AUTHORIZED_KEYS = "authorized_keys"
KNOWN_HOSTS = "known_hosts"
SSHD_CONFIG = "sshd_config"
SSH_CONFIG = "ssh_config"
HOSTFILE = "hostfile"
MPICH_HOSTFILE = "hostfile.mpich"

_HOST = re.compile(r"[A-Za-z0-9_.:%-]+\Z")
# A cluster engine picks the nodes after hetflow wrote the gang's files: each peer's host is
# this placeholder until the engine's job fills it in (``resolve_hosts``; Slurm: sed).
PLACEHOLDER_PREFIX = "hetflow-host-"


class MpiError(HetflowError):
    """An MPI gang cannot be set up: bad peers, or no way to make its SSH keys."""


@dataclass(frozen=True)
class MpiPeer:
    """One replica of an MPI gang: its rank, the address the others reach it at, the
    port its sshd listens on, and how many MPI processes it runs (``slots``)."""

    rank: int
    host: str
    port: int = DEFAULT_PORT
    slots: int = 1

    @property
    def alias(self) -> str:
        """The peer's name in the hostfiles and the ssh_config's ``Host`` lines."""
        return f"{ALIAS_PREFIX}{self.rank}"


@dataclass(frozen=True)
class MpiFiles:
    """The files of one gang: ``directory`` on the host, mounted read-only at
    ``mount`` in every replica; ``keygen`` says what made the keys ("ssh-keygen" or
    "cryptography")."""

    directory: Path
    peers: tuple[MpiPeer, ...]
    keygen: str
    mount: str = MPI_MOUNT
    names: tuple[str, ...] = field(
        default=(IDENTITY, f"{IDENTITY}.pub", HOST_KEY, f"{HOST_KEY}.pub", AUTHORIZED_KEYS, KNOWN_HOSTS,
                 SSHD_CONFIG, SSH_CONFIG, HOSTFILE, MPICH_HOSTFILE)
    )  # fmt: skip

    def inside(self, name: str) -> str:
        """A file's path inside the containers."""
        return str(PurePosixPath(self.mount) / name)

    @property
    def ssh_config(self) -> str:
        return self.inside(SSH_CONFIG)

    @property
    def sshd_config(self) -> str:
        return self.inside(SSHD_CONFIG)

    @property
    def hostfile(self) -> str:
        return self.inside(HOSTFILE)

    @property
    def mpich_hostfile(self) -> str:
        return self.inside(MPICH_HOSTFILE)

    @property
    def slots(self) -> int:
        return sum(peer.slots for peer in self.peers)


# --- checks --------------------------------------------------------------------------


def check_peers(peers: Sequence[MpiPeer]) -> tuple[MpiPeer, ...]:
    """Peers sorted by rank; ranks must be 0..n-1 and (host, port) pairs distinct."""
    if not peers:
        raise MpiError("an MPI gang needs at least one peer")
    ordered = tuple(sorted(peers, key=lambda p: p.rank))
    ranks = [p.rank for p in ordered]
    if ranks != list(range(len(ordered))):
        raise MpiError(f"MPI peers must have ranks 0..{len(ordered) - 1}, each once; got {ranks}")
    seen: dict[tuple[str, int], int] = {}
    for peer in ordered:
        if not peer.host or not _HOST.match(peer.host):
            raise MpiError(f"MPI peer {peer.rank}: {peer.host!r} is not a host name or address")
        if not 1 <= peer.port <= 65535:
            raise MpiError(f"MPI peer {peer.rank}: port {peer.port} is not in 1..65535")
        if peer.slots < 1:
            raise MpiError(f"MPI peer {peer.rank}: slots must be at least 1, not {peer.slots}")
        other = seen.setdefault((peer.host, peer.port), peer.rank)
        if other != peer.rank:
            raise MpiError(
                f"MPI peers {other} and {peer.rank} both use {peer.host} port {peer.port}: "
                "peers sharing a host need distinct ports"
            )
    return ordered


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def mpi_folder(mounts: Iterable[Mount], mount: str = MPI_MOUNT) -> str | None:
    """The host folder of a replica's MPI gang files (what is mounted at ``mount``), or
    None: the replica is not in an MPI gang."""
    return next((m.source for m in mounts if m.target == mount), None)


def placeholder_host(rank: int) -> str:
    """Peer ``rank``'s host in a gang whose nodes are not known yet."""
    return f"{PLACEHOLDER_PREFIX}{rank}"


def resolve_hosts(ssh_config: str, hosts: Sequence[str]) -> str:
    """The ssh_config with each placeholder ``HostName`` replaced by peer ``rank``'s address
    (``hosts[rank]``); MpiError when a host is not a host name or address, or when the
    config names a placeholder that ``hosts`` does not fill."""
    for rank, host in enumerate(hosts):
        if not host or not _HOST.match(host):
            raise MpiError(f"MPI peer {rank}: {host!r} is not a host name or address")

    def fill(m: re.Match[str]) -> str:
        rank = int(m["rank"])
        if rank >= len(hosts):
            raise MpiError(f"the ssh_config names peer {rank}, but only {len(hosts)} hosts were given")
        return f"{m['lead']}{hosts[rank]}"

    return re.sub(rf"(?m)^(?P<lead>\s*HostName ){PLACEHOLDER_PREFIX}(?P<rank>\d+)$", fill, ssh_config)


# --- keys ----------------------------------------------------------------------------


def _keygen_ssh(path: Path) -> None:
    tool = shutil.which("ssh-keygen")
    assert tool is not None
    cmd = [tool, "-q", "-t", "ed25519", "-N", "", "-C", KEY_COMMENT, "-f", str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise MpiError(f"`{' '.join(cmd)}` exited {done.returncode}: {(done.stderr or done.stdout).strip()}")


def _keygen_cryptography(path: Path) -> None:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    path.write_bytes(private)
    path.with_name(path.name + ".pub").write_bytes(public + f" {KEY_COMMENT}\n".encode())


def _keygen() -> str:
    """Which key generator this host has: ssh-keygen first, else the cryptography package."""
    if shutil.which("ssh-keygen"):
        return "ssh-keygen"
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise MpiError(
            "an MPI gang needs an SSH key pair, and neither ssh-keygen nor the Python package "
            "cryptography is installed: `apt-get install -y openssh-client` or `pip install cryptography`"
        ) from None
    return "cryptography"


def _make_key(path: Path, keygen: str) -> str:
    """Write an ed25519 key pair at path and path.pub; returns the public key line."""
    (_keygen_ssh if keygen == "ssh-keygen" else _keygen_cryptography)(path)
    return path.with_name(path.name + ".pub").read_text().strip()


# --- file contents (pure) ------------------------------------------------------------


def sshd_config_text(mount: str = MPI_MOUNT, env: Mapping[str, str] | None = None, *, root: bool = False) -> str:
    """An sshd_config for an unprivileged sshd: the port comes from ``sshd -p``; only
    the gang's key logs in; no PAM, no privilege separation, no forwarding; ``env`` is
    set in every session (the containers' env does not reach ssh sessions).  ``root``:
    the replicas run as root (a root submitter), so root may log in, by key only."""
    lines = [
        "# hetflow MPI gang: an unprivileged sshd (the port is given with -p)",
        f"Port {DEFAULT_PORT}",
        f"HostKey {mount}/{HOST_KEY}",
        f"AuthorizedKeysFile {mount}/{AUTHORIZED_KEYS}",
        f"PidFile {SSHD_PID}",
        "UsePAM no",
        "StrictModes no",
        f"PermitRootLogin {'prohibit-password' if root else 'no'}",
        "AuthenticationMethods publickey",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "HostbasedAuthentication no",
        "PermitEmptyPasswords no",
        "PermitUserEnvironment no",
        "AllowTcpForwarding no",
        "AllowAgentForwarding no",
        "AllowStreamLocalForwarding no",
        "X11Forwarding no",
        "PermitTunnel no",
        "PermitTTY no",
        "PrintMotd no",
        "PrintLastLog no",
        "UseDNS no",
        "MaxStartups 200:30:400",
        "MaxSessions 64",
        "LogLevel ERROR",
    ]
    if env:
        lines.append("SetEnv " + " ".join(f'{k}="{v}"' for k, v in sorted(env.items())))
    return "\n".join(lines) + "\n"


def ssh_config_text(peers: Sequence[MpiPeer], mount: str = MPI_MOUNT) -> str:
    """An ssh_config with one ``Host`` alias per peer (HostName and Port), the gang's
    identity, and the gang's host key as the only known one."""
    lines = ["# hetflow MPI gang: one alias per peer; use with ssh -F"]
    for peer in check_peers(peers):
        lines += [f"Host {peer.alias}", f"  HostName {peer.host}", f"  Port {peer.port}"]
    lines += [
        "Host *",
        f"  IdentityFile {mount}/{IDENTITY}",
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        "  BatchMode yes",
        "  PasswordAuthentication no",
        "  KbdInteractiveAuthentication no",
        # Every replica has the gang's one host key: the known_hosts file lists it for
        # any name, so no peer can be impersonated by a host without the gang's key.
        "  StrictHostKeyChecking yes",
        f"  UserKnownHostsFile {mount}/{KNOWN_HOSTS}",
        "  GlobalKnownHostsFile /dev/null",
        "  CheckHostIP no",
        "  UpdateHostKeys no",
        "  HashKnownHosts no",
        "  ForwardAgent no",
        "  ForwardX11 no",
        "  ConnectTimeout 10",
        "  ServerAliveInterval 30",
        "  LogLevel ERROR",
    ]
    return "\n".join(lines) + "\n"


def hostfile_text(peers: Sequence[MpiPeer]) -> str:
    """Open MPI's hostfile: ``alias slots=N`` per peer."""
    return "".join(f"{p.alias} slots={p.slots}\n" for p in check_peers(peers))


def mpich_hostfile_text(peers: Sequence[MpiPeer]) -> str:
    """MPICH (hydra)'s hostfile: ``alias:N`` per peer."""
    return "".join(f"{p.alias}:{p.slots}\n" for p in check_peers(peers))


# --- writing -------------------------------------------------------------------------


def write_mpi_files(
    directory: Path,
    peers: Sequence[MpiPeer],
    *,
    owner: tuple[int, int] | None = None,
    mount: str = MPI_MOUNT,
) -> MpiFiles:
    """Write one gang's SSH keys, configs and hostfiles into ``directory`` (created;
    it must not hold a previous gang's files) and return what the commands need.

    ``owner`` is the containers' UID:GID.  Given, and when this process may chown
    (root, or it is our own UID), the files become theirs with private keys 0600 and
    the folder 0700.  Otherwise every file is 0644 in a 0755 folder: readable by any
    UID, which ssh accepts for a key file that is not owned by the user reading it;
    keep the parent folder private then.  Keys: ssh-keygen when on PATH, else the
    cryptography package (``MpiFiles.keygen`` says which); neither raises MpiError."""
    ordered = check_peers(peers)
    keygen = _keygen()
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise MpiError(f"{directory} is not empty: each MPI gang needs a fresh folder for its keys")
    chown = owner is not None and (os.geteuid() == 0 or os.geteuid() == owner[0])
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700 if chown else 0o755)
    with tempfile.TemporaryDirectory(prefix="hetflow-mpi-keys-") as tmp:
        for name in (IDENTITY, HOST_KEY):
            _make_key(Path(tmp) / name, keygen)
            for suffix in ("", ".pub"):
                shutil.copyfile(Path(tmp) / (name + suffix), directory / (name + suffix))
    user_key = (directory / f"{IDENTITY}.pub").read_text().strip()
    host_key = (directory / f"{HOST_KEY}.pub").read_text().strip()
    key_type, key_data = host_key.split()[:2]
    texts = {
        AUTHORIZED_KEYS: user_key + "\n",
        KNOWN_HOSTS: f"* {key_type} {key_data}\n",
        SSHD_CONFIG: sshd_config_text(mount, session_env(), root=owner is not None and owner[0] == 0),
        SSH_CONFIG: ssh_config_text(ordered, mount),
        HOSTFILE: hostfile_text(ordered),
        MPICH_HOSTFILE: mpich_hostfile_text(ordered),
    }
    for name, text in texts.items():
        (directory / name).write_text(text)
    files = MpiFiles(directory, ordered, keygen, mount)
    for name in files.names:
        path = directory / name
        private = name in (IDENTITY, HOST_KEY)
        path.chmod(0o600 if private and chown else 0o644)
        if chown and owner is not None:
            os.chown(path, *owner)
    if chown and owner is not None:
        os.chown(directory, *owner)
    return files


# --- environment (the commands: ``mpicommands``) -------------------------------------


def session_env() -> dict[str, str]:
    """What every ssh session (and so every orted and rank) gets: HOME on the tmpfs
    (podman's passwd entry for a UID it adds has HOME=/, read-only)."""
    return {"HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}
