"""hetflow.execute.gang.mpilaunch: an MPI gang's files and commands (no containers here;
tests/integration/test_mpi_containers.py runs them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hetflow.errors import HetflowError
from hetflow.execute.gang import mpilaunch
from hetflow.execute.gang.mpicommands import launcher_command, mca_params, mpi_env, worker_command
from hetflow.execute.gang.mpilaunch import (
    MPI_MOUNT,
    MpiError,
    MpiPeer,
    hostfile_text,
    mpich_hostfile_text,
    ssh_config_text,
    write_mpi_files,
)

PEERS = [MpiPeer(0, "gang-0"), MpiPeer(1, "gang-1", slots=2)]
LOOPBACK = [MpiPeer(0, "127.0.0.1", 2222), MpiPeer(1, "127.0.0.1", 2223)]
needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs ssh-keygen")


def _derived_public(private: Path, tmp: Path) -> list[str]:
    """ssh-keygen -y of a copy at 0600 (ssh refuses a 0644 key file its reader owns)."""
    copy = tmp / "derive-key"
    shutil.copyfile(private, copy)
    copy.chmod(0o600)
    done = subprocess.run(["ssh-keygen", "-y", "-f", str(copy)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[:2]


def _hosts(config: str) -> dict[str, dict[str, str]]:
    """ssh_config as {Host pattern: {option: value}}."""
    hosts: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in config.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.strip().partition(" ")
        if key == "Host":
            current = hosts.setdefault(value, {})
        else:
            current[key] = value
    return hosts


def test_hostfiles_have_one_alias_per_peer_with_its_slots() -> None:
    assert hostfile_text(PEERS) == "hetflow-rank-0 slots=1\nhetflow-rank-1 slots=2\n"
    assert mpich_hostfile_text(PEERS) == "hetflow-rank-0:1\nhetflow-rank-1:2\n"
    # sorted by rank whatever the order given
    assert hostfile_text(PEERS[::-1]) == hostfile_text(PEERS)


def test_ssh_config_maps_each_alias_to_host_and_port_so_peers_can_share_an_address() -> None:
    hosts = _hosts(ssh_config_text(LOOPBACK))
    assert hosts["hetflow-rank-0"] == {"HostName": "127.0.0.1", "Port": "2222"}
    assert hosts["hetflow-rank-1"] == {"HostName": "127.0.0.1", "Port": "2223"}
    every = hosts["*"]
    assert every["IdentityFile"] == f"{MPI_MOUNT}/id_ed25519"
    assert every["IdentitiesOnly"] == "yes" and every["BatchMode"] == "yes"
    assert every["UserKnownHostsFile"] == f"{MPI_MOUNT}/known_hosts"
    assert every["StrictHostKeyChecking"] == "yes"


@pytest.mark.parametrize(
    ("peers", "message"),
    [
        ([], "at least one peer"),
        ([MpiPeer(1, "a")], "ranks 0..0"),
        ([MpiPeer(0, "a"), MpiPeer(0, "b")], "ranks 0..1"),
        ([MpiPeer(0, "a"), MpiPeer(1, "a")], "distinct ports"),
        ([MpiPeer(0, "a b")], "not a host name"),
        ([MpiPeer(0, "a", port=0)], "port 0"),
        ([MpiPeer(0, "a", slots=0)], "slots"),
    ],
)
def test_bad_peers_are_refused_with_a_reason(peers: list[MpiPeer], message: str) -> None:
    with pytest.raises(MpiError, match=message):
        hostfile_text(peers)
    assert issubclass(MpiError, HetflowError)


@needs_keygen
def test_write_mpi_files_makes_keys_configs_and_hostfiles_readable_by_any_uid(tmp_path: Path) -> None:
    files = write_mpi_files(tmp_path / "mpi", PEERS)
    d = files.directory
    assert files.keygen == "ssh-keygen"
    assert sorted(p.name for p in d.iterdir()) == sorted(files.names)
    assert d.stat().st_mode & 0o777 == 0o755
    for name in files.names:
        assert (d / name).stat().st_mode & 0o777 == 0o644, name
    user_pub = (d / "id_ed25519.pub").read_text().split()
    assert user_pub[0] == "ssh-ed25519"
    assert (d / "authorized_keys").read_text().split()[:2] == user_pub[:2]
    host_pub = (d / "ssh_host_ed25519_key.pub").read_text().split()
    assert (d / "known_hosts").read_text() == f"* ssh-ed25519 {host_pub[1]}\n"
    assert (d / "hostfile").read_text() == hostfile_text(PEERS)
    sshd = (d / "sshd_config").read_text()
    for line in (
        f"HostKey {MPI_MOUNT}/ssh_host_ed25519_key",
        f"AuthorizedKeysFile {MPI_MOUNT}/authorized_keys",
        "UsePAM no",
        "StrictModes no",
        "PasswordAuthentication no",
        "PidFile /tmp/hetflow-mpi-sshd.pid",
    ):
        assert line in sshd.splitlines()
    assert 'HOME="/tmp"' in sshd
    # the private key is a valid OpenSSH key: ssh-keygen derives the same public key from it
    assert _derived_public(d / "id_ed25519", tmp_path) == user_pub[:2]
    # sshd accepts the configuration (-t: test mode)
    if Path("/usr/sbin/sshd").exists():
        sshd_config = d / "sshd_config"
        text = sshd_config.read_text().replace(MPI_MOUNT, str(d))
        sshd_config.write_text(text)
        checked = subprocess.run(["/usr/sbin/sshd", "-t", "-f", str(sshd_config)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


@needs_keygen
@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_write_mpi_files_with_an_owner_gives_the_files_to_it_with_private_keys_0600(tmp_path: Path) -> None:
    files = write_mpi_files(tmp_path / "mpi", PEERS, owner=(1000, 1001))
    d = files.directory
    assert d.stat().st_mode & 0o777 == 0o700 and (d.stat().st_uid, d.stat().st_gid) == (1000, 1001)
    for name in files.names:
        st = (d / name).stat()
        assert (st.st_uid, st.st_gid) == (1000, 1001)
        assert st.st_mode & 0o777 == (0o600 if name in ("id_ed25519", "ssh_host_ed25519_key") else 0o644)


def test_write_mpi_files_uses_cryptography_without_ssh_keygen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("cryptography")
    real_which = shutil.which
    monkeypatch.setattr(mpilaunch.shutil, "which", lambda name: None if name == "ssh-keygen" else real_which(name))
    files = write_mpi_files(tmp_path / "mpi", PEERS)
    assert files.keygen == "cryptography"
    private = (files.directory / "id_ed25519").read_text()
    assert private.startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    if real_which("ssh-keygen"):
        public = (files.directory / "id_ed25519.pub").read_text().split()
        assert _derived_public(files.directory / "id_ed25519", tmp_path) == public[:2]
        assert public[2] == "hetflow-mpi-gang"


def test_no_key_generator_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_cryptography(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("cryptography"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(mpilaunch.shutil, "which", lambda name: None)
    monkeypatch.setattr(builtins, "__import__", no_cryptography)
    with pytest.raises(MpiError, match="ssh-keygen nor the Python package cryptography"):
        write_mpi_files(tmp_path / "mpi", PEERS)


@needs_keygen
def test_a_folder_with_another_gangs_files_is_refused(tmp_path: Path) -> None:
    write_mpi_files(tmp_path / "mpi", PEERS)
    with pytest.raises(MpiError, match="not empty"):
        write_mpi_files(tmp_path / "mpi", PEERS)


@needs_keygen
def test_worker_runs_sshd_in_the_foreground_on_its_port(tmp_path: Path) -> None:
    files = write_mpi_files(tmp_path / "mpi", LOOPBACK)
    assert worker_command(files, LOOPBACK[1]) == [
        "/usr/sbin/sshd", "-f", f"{MPI_MOUNT}/sshd_config", "-p", "2223", "-D", "-e",
    ]  # fmt: skip
    with pytest.raises(MpiError, match="not one of this gang"):
        worker_command(files, MpiPeer(1, "elsewhere"))


@needs_keygen
def test_launcher_starts_its_sshd_waits_for_every_peer_then_runs_mpirun(tmp_path: Path) -> None:
    files = write_mpi_files(tmp_path / "mpi", PEERS)
    cmd = launcher_command(files, ["python3", "/app/gang/allreduce.py"], 3, export=["FOO"], timeout=30)
    assert cmd[:2] == ["/bin/sh", "-c"]
    script, argv0, user = cmd[2], cmd[3], cmd[4:]
    assert argv0 == "hetflow-mpi-launcher" and user == ["python3", "/app/gang/allreduce.py"]
    assert f"/usr/sbin/sshd -f {MPI_MOUNT}/sshd_config -p 2222 -E /tmp/hetflow-mpi-sshd.log" in script
    assert "for alias in hetflow-rank-0 hetflow-rank-1; do" in script
    assert f"ssh -F {MPI_MOUNT}/ssh_config" in script and "+ 30 ))" in script
    mpirun = next(line for line in script.splitlines() if line.startswith("exec mpirun"))
    assert f"--hostfile {MPI_MOUNT}/hostfile -np 3" in mpirun
    assert f"--mca plm_rsh_agent 'ssh -F {MPI_MOUNT}/ssh_config'" in mpirun
    assert "--mca btl_vader_single_copy_mechanism none" in mpirun and "-x FOO" in mpirun
    assert mpirun.endswith('"$@"')
    # the script is valid sh
    assert subprocess.run(["sh", "-n", "-c", script], check=False).returncode == 0
    with pytest.raises(MpiError, match="does not fit the gang's 3 slots"):
        launcher_command(files, ["true"], 4)
    with pytest.raises(MpiError, match="needs a command"):
        launcher_command(files, [], 2)


def test_mca_settings_use_loopback_only_when_every_peer_is_on_it() -> None:
    loop = mca_params(LOOPBACK)
    assert loop["oob_tcp_if_include"] == "lo" and loop["btl_tcp_if_include"] == "lo"
    net = mca_params(PEERS)
    assert "oob_tcp_if_include" not in net and net["btl_tcp_if_exclude"] == "lo,docker0"
    for params in (loop, net):
        assert params["btl"] == "self,vader,tcp" and params["btl_vader_single_copy_mechanism"] == "none"
        assert params["orte_tmpdir_base"] == "/tmp"


def test_mpi_env_has_the_mca_settings_home_on_tmp_and_the_rank() -> None:
    env = mpi_env(PEERS[1], 3, PEERS)
    assert env["OMPI_MCA_plm_rsh_agent"] == f"ssh -F {MPI_MOUNT}/ssh_config"
    assert env["HOME"] == "/tmp"
    assert env["HETFLOW_MPI_RANK"] == "1" and env["HETFLOW_MPI_WORLD_SIZE"] == "3"
    assert env["HETFLOW_MPI_DIR"] == MPI_MOUNT
    with pytest.raises(MpiError):
        mpi_env(PEERS[0], 0)
