"""``hetflow registry login``: register the node's hardware, then log the engine in.
The engine here is a script that records its arguments and stdin (no podman needed)."""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hetflow.cli.oci.registry import login_command, register_node
from hetflow.errors import EngineError, UsageError
from hetflow.images import AuthError, RegistryError
from hetflow.inventory import profile_node
from hetflow.registry import FakeRegistry, RunningProxy, Settings, start_in_thread

NODE = profile_node("a100-node").model_copy(update={"name": "gpu01"})


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[RunningProxy]:
    settings = Settings(upstream="http://upstream.test", state_dir=tmp_path / "state")
    running = start_in_thread(settings, transport=FakeRegistry().transport())
    try:
        yield running
    finally:
        running.stop()


def _engine(tmp_path: Path, name: str = "podman", exit_code: int = 0) -> Path:
    """A stand-in engine: writes argv and stdin to <name>.log as JSON."""
    script = tmp_path / name
    log = tmp_path / f"{name}.log"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(log)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'stdin': sys.stdin.read()}}))\n"
        f"print('Error: refused', file=sys.stderr) if {exit_code} else print('Login Succeeded!')\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _log(engine: Path) -> dict[str, object]:
    data: dict[str, object] = json.loads(engine.with_name(engine.name + ".log").read_text())
    return data


def test_login_registers_and_hands_the_token_to_podman_on_stdin(proxy: RunningProxy, tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    result = login_command(proxy.url, NODE, str(engine), authfile=tmp_path / "auth.json")
    assert result.created and result.registry == proxy.host
    log = _log(engine)
    assert log["argv"] == [
        "login", "--tls-verify=false", "--authfile", str(tmp_path / "auth.json"),
        "-u", result.machine_type, "--password-stdin", proxy.host,
    ]  # fmt: skip
    assert log["stdin"] == result.token
    assert result.token not in repr(result)
    # The token the engine got really logs in at the proxy's token endpoint.
    assert httpx.get(f"{proxy.url}/token", auth=(result.machine_type, str(log["stdin"]))).status_code == 200


def test_a_second_node_alike_joins_the_same_type(proxy: RunningProxy, tmp_path: Path) -> None:
    first = login_command(proxy.url, NODE, str(_engine(tmp_path)))
    second = login_command(proxy.url, NODE.model_copy(update={"name": "gpu02"}), str(_engine(tmp_path)))
    assert (second.machine_type, second.created) == (first.machine_type, False)


def test_docker_gets_no_podman_flags(proxy: RunningProxy, tmp_path: Path) -> None:
    engine = _engine(tmp_path, "docker")
    result = login_command(proxy.url, NODE, str(engine), name="lab-a100")
    assert _log(engine)["argv"] == ["login", "-u", "lab-a100", "--password-stdin", proxy.host]
    assert result.machine_type == "lab-a100"
    with pytest.raises(UsageError, match="--authfile is podman's"):
        login_command(proxy.url, NODE, str(engine), authfile=tmp_path / "a.json")


def test_an_engine_that_refuses_is_an_engine_error(proxy: RunningProxy, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="failed \\(1\\): Error: refused"):
        login_command(proxy.url, NODE, str(_engine(tmp_path, exit_code=1)))


def test_a_guarded_proxy_wants_the_admin_token(tmp_path: Path) -> None:
    settings = Settings(upstream="http://upstream.test", state_dir=tmp_path / "s", admin_token="adm1n-token-16chars")
    running = start_in_thread(settings, transport=FakeRegistry().transport())
    try:
        with pytest.raises(AuthError, match="needs its admin token"):
            register_node(running.url, NODE)
        assert register_node(running.url, NODE, admin_token="adm1n-token-16chars").created
    finally:
        running.stop()


@pytest.mark.parametrize(
    ("url", "error"),
    [
        pytest.param("127.0.0.1:5080", UsageError, id="no-scheme"),
        pytest.param("http://127.0.0.1:9", RegistryError, id="nobody-listening"),
    ],
)
def test_bad_proxy_urls_say_so(url: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        register_node(url, NODE)
