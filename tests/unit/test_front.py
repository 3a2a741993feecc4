"""The HTTP front's configuration (hetflow.front.haproxy.render): a pure function of the
limits, checked line by line and by HAProxy itself (``haproxy -c``), and the registry's and
the dashboard's words for the front's own answers."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from hetflow.front import Answers, FrontLimits, render
from hetflow.front.haproxy import bufsize
from hetflow.front.process import front_maxconn
from hetflow.registry import Limits
from hetflow.registry.server.serving import answers as registry_answers
from hetflow.registry.server.serving import front_limits
from hetflow.ui.serving import ANSWERS as UI_ANSWERS
from hetflow.ui.serving import LIMITS as UI_LIMITS


def _config(limits: FrontLimits = FrontLimits(), answers: Answers = Answers()) -> str:
    return render(limits, answers, listen_fd=3, app_socket=Path("/run/x/app.sock"), maxconn=8192)


@pytest.mark.parametrize(
    ("limits", "lines"),
    [
        pytest.param(
            FrontLimits(),
            [
                "option http-buffer-request",
                "timeout http-request 10s",
                "timeout client 30s",
                "timeout http-keep-alive 5s",
                "bind fd@3",
                "tcp-request connection reject if { sc0_conn_cur gt 128 }",
                "server app unix@/run/x/app.sock maxconn 1024",
                "tune.bufsize 81920",
            ],
            id="defaults",
        ),
        pytest.param(
            FrontLimits(request_timeout_s=2.5, max_connections=30, max_connections_per_client=7),
            ["timeout http-request 2500ms", "server app unix@/run/x/app.sock maxconn 30", "sc0_conn_cur gt 7 }"],
            id="fractions-in-ms",
        ),
        pytest.param(FrontLimits(max_body_bytes=1024), ["tune.bufsize 17408"], id="small-body-buffer"),
    ],
)
def test_the_configuration_says_every_limit(limits: FrontLimits, lines: list[str]) -> None:
    text = _config(limits)
    for line in lines:
        assert line in text, f"{line!r} not in:\n{text}"


def test_the_buffer_holds_the_largest_body_so_the_deadline_covers_it_whole() -> None:
    for most in (1024, 65536, 1 << 20):
        assert bufsize(FrontLimits(max_body_bytes=most)) >= most + 16384


def test_the_front_answers_in_the_services_words_with_their_headers() -> None:
    text = _config(FrontLimits(max_requests_per_client=5), registry_answers(Limits(max_requests_per_client=5)))
    rule = next(line for line in text.splitlines() if "return status 429" in line)
    body = json.loads(rule.split("string '", 1)[1].split("'", 1)[0])
    assert body["errors"][0]["code"] == "TOOMANYREQUESTS"
    assert "limits.max_requests_per_client" in body["errors"][0]["message"]
    assert 'hdr docker-distribution-api-version "registry/2.0"' in rule
    assert "if { sc0_conn_cur gt 5 }" in rule
    ui = _config(UI_LIMITS, UI_ANSWERS)
    error = next(line for line in ui.splitlines() if "http-error status 503" in line)
    assert json.loads(error.split("string '", 1)[1].split("'", 1)[0])["error"]
    assert "hdr content-security-policy \"default-src 'self';" in error  # single quotes inside double ones
    assert 'hdr x-frame-options "DENY"' in error


def test_a_quote_in_a_message_stays_json_and_a_percent_in_a_header_is_refused() -> None:
    text = _config(answers=Answers(messages={429: "it's too many"}))
    rule = next(line for line in text.splitlines() if "return status 429" in line)
    assert json.loads(rule.split("string '", 1)[1].split("'", 1)[0]) == {"error": "it's too many"}
    with pytest.raises(ValueError, match="'%'"):
        _config(answers=Answers(headers=(("X-Odd", "100%"),)))


@pytest.mark.parametrize("field", ["request_timeout_s", "idle_timeout_s", "max_connections", "max_body_bytes"], ids=str)
def test_a_limit_of_zero_is_refused_naming_it(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        FrontLimits(**{field: 0})  # type: ignore[arg-type]


def test_the_front_holds_what_the_file_limit_allows() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    most = front_maxconn(FrontLimits(max_connections=1_000_000))
    assert hard == resource.RLIM_INFINITY or 2 * most <= hard


def test_the_registrys_limits_reach_the_front() -> None:
    limits = Limits(max_connections=30, request_timeout_s=3, upstream_total_timeout_s=600)
    front = front_limits(limits)
    assert (front.max_connections, front.request_timeout_s) == (30, 3)
    assert front.app_timeout_s > limits.upstream_total_timeout_s  # the app answers a fill's deadline itself


@pytest.mark.skipif(shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists(), reason="no haproxy")
@pytest.mark.parametrize(
    ("limits", "answers"),
    [
        pytest.param(FrontLimits(), Answers(), id="plain"),
        pytest.param(front_limits(Limits()), registry_answers(Limits()), id="registry"),
        pytest.param(UI_LIMITS, UI_ANSWERS, id="dashboard"),
    ],
)
def test_haproxy_reads_the_configuration_as_written(tmp_path: Path, limits: FrontLimits, answers: Answers) -> None:
    from hetflow.front import find_haproxy

    with socket.socket() as listen:
        listen.bind(("127.0.0.1", 0))
        listen.listen()
        config = tmp_path / "haproxy.cfg"
        text = render(limits, answers, listen_fd=listen.fileno(), app_socket=tmp_path / "app.sock", maxconn=1024)
        config.write_text(text)
        done = subprocess.run(
            [find_haproxy(), "-c", "-f", str(config)], capture_output=True, text=True, pass_fds=(listen.fileno(),)
        )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr, done.stdout + done.stderr
