"""`hetflow ui` refuses bad options before it serves anything: one message naming the
option and what to change, exit 2, no traceback, and no URL printed for a server that
never started."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.ui import UiConfig, bind, is_loopback


def hetflow(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"HETFLOW_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "hetflow.cli.main", "ui", *args],
        env={**env, "PYTHONPATH": ":".join(sys.path)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--token", "short"], "--token: give at least 16 characters"),
        (["--root", "/no/such/dir"], "--root /no/such/dir: not a directory"),
        (["--host", "no-such-host.invalid"], "--host 'no-such-host.invalid': not an address this machine can bind"),
        (["--port", "70000"], "less than or equal to 65535"),
        (["--open", "ffffffff"], "no run 'ffffffff'"),
        (["--token-file", "/no/such/token"], "--token-file /no/such/token: cannot read it"),
        (["--token-file", "/dev/null"], "--token-file /dev/null: the file is empty"),
        (["--token-file", "/dev/null", "--token", "x" * 20], "give the token once"),
    ],
    ids=["short-token", "root-missing", "bad-host", "port-range", "unknown-run", "no-token-file", "empty", "both"],
)
def test_bad_options_exit_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    done = hetflow(tmp_path, *args)

    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert "http://" not in done.stderr  # no URL for a dashboard that is not there


def test_a_taken_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = hetflow(tmp_path, "--port", str(port))

    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr and "give another --port" in done.stderr


def test_bind_gives_a_listening_socket_on_the_port_asked() -> None:
    sock = bind("127.0.0.1", 0)
    try:
        host, port = sock.getsockname()
        assert host == "127.0.0.1" and port > 0
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # accepted by the backlog: the socket listens
    finally:
        sock.close()


@pytest.mark.parametrize(
    ("host", "actions", "needs"),
    [
        ("127.0.0.1", False, False),
        ("::1", False, False),
        ("localhost", False, False),
        ("127.0.0.1", True, True),  # actions always need the token
        ("0.0.0.0", False, True),
        ("10.1.2.3", False, True),
        ("example.org", False, True),
    ],
)
def test_a_token_is_needed_off_loopback_or_with_actions(tmp_path: Path, host: str, actions: bool, needs: bool) -> None:
    config = UiConfig(store_path=tmp_path / "state.db", host=host, actions=actions).checked()

    assert config.needs_token is needs
    assert (config.token is not None) is needs
    if needs:
        assert config.token is not None and len(config.token) >= 32
        assert config.url().endswith(f"?token={config.token}")
    assert is_loopback(host) is (host in ("127.0.0.1", "::1", "localhost"))


def test_a_given_token_is_kept_and_each_made_token_differs(tmp_path: Path) -> None:
    given = UiConfig(store_path=tmp_path / "s", host="0.0.0.0", token="x" * 20).checked()
    made = [UiConfig(store_path=tmp_path / "s", host="0.0.0.0").checked().token for _ in range(3)]

    assert given.token == "x" * 20
    assert len(set(made)) == 3
    assert given.url() == f"http://127.0.0.1:8786/?token={'x' * 20}"  # 0.0.0.0: shown as an address to open


def _first_lines(tmp_path: Path, args: list[str], env: dict[str, str]) -> str:
    """What a started ``hetflow ui --port 0`` prints up to its URL, then it is stopped."""
    base = {"HETFLOW_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetflow.cli.main", "ui", "--port", "0", *args],
        env={**base, **env},
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    try:
        lines = []
        for line in proc.stderr:  # ends at the URL line (or when the process dies)
            lines.append(line)
            if "http://" in line:
                break
        return "".join(lines)
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize(
    ("how", "warned"),
    [("command-line", True), ("environment", False), ("file", False)],
    ids=["command-line", "environment", "file"],
)
def test_the_token_can_stay_out_of_ps_and_on_the_command_line_it_is_warned_about(
    tmp_path: Path, how: str, warned: bool
) -> None:
    token = "s3cret-" + "k" * 20
    (tmp_path / "token").write_text(token + "\n")
    args, env = {
        "command-line": (["--token", token], {}),
        "environment": ([], {"HETFLOW_UI_TOKEN": token}),
        "file": (["--token-file", str(tmp_path / "token")], {}),
    }[how]
    printed = _first_lines(tmp_path, [*args, "--actions"], env)
    assert f"?token={token}" in printed  # the token asked for is the one required
    assert ("visible to every local user" in printed) is warned
