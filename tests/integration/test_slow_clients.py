"""Slow clients against both services on loopback, with their default limits (issue 38):
Debian's slowhttptest opens about a thousand slow connections from 127.0.0.1 (slow headers,
a slow body, a slow read) while another client, 127.0.0.2, asks for a small cached blob (the
registry proxy) or the run list (the dashboard), each on a new connection.

Each test holds that (1) every one of the other client's requests is answered, (2) their p99
stays within 100 ms, or twice the p99 of the same requests with no attack just before (the
anchor: a loaded machine slows both alike), (3) the server holds at most 128 connections
from the attacker's address, those still sending headers too, and (4) it cuts every slow
connection while the attack still runs: none is held past its deadline.  The anchor is taken again
after the attack, and shown.

Before issue 38 both ran on uvicorn alone: 1,100 slow-header sockets (past its 1,024
connections) made the proxy answer 503 to everyone; the dashboard held every one of them (and
433 slow readers); neither ever cut a slow connection.  The dashboard's slow-body case passed
before too: it reads no body, answered at once and closed the connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

from hetflow.state import Store
from tests.integration.slowhttp import Attack, HeldWatch, Probes, held, probe, slow_attack, wait_for
from tests.integration.uikit import dashboard, synthetic_run

pytestmark = pytest.mark.integration

BOUND_S = 0.100  # the p99 the other client must keep (or twice its anchor's)
PER_ADDRESS = 128  # connections one address may hold, those still sending headers too (the default)
ROUNDS = 3  # rounds of the other client's requests during an attack, while one misses the bound
ATTACK_ON = 50  # attack connections on the server: it is on (the old proxy let 64 of one address in)
# Every attack connection cut within this after the attack opened them all: the request
# deadline (10 s) or, for a reader taking 32 bytes a second, the idle cut (30 s), with slack.
CUT_WITHIN_S = {"headers": 45.0, "body": 45.0, "read": 75.0}
ATTACKS = {
    # 1,100 slow-header sockets: past the 1,024 connections uvicorn alone held (the regression)
    "headers": Attack("headers", 1100, 100),
    "body": Attack("body", 1000, 100),
    "read": Attack("read", 1000, 130),
}


@dataclass(frozen=True)
class Target:
    base: str  # http://127.0.0.1:PORT
    port: int
    path: str  # what the other client asks for
    headers: dict[str, str]  # the other client's, and the slow reader's
    urls: dict[str, str]  # the URL each attack mode aims at
    body_bytes: int  # the slow body promises what the service takes (the front waits for it)


@contextmanager
def registry_target(tmp_path: Path) -> Iterator[Target]:
    """The proxy (``hetflow.registry.fakes.fakeproxy``, its own process) with a 1 KiB and a 1 MiB
    cached blob, every limit at its default."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "hetflow.registry.fakes.fakeproxy", str(tmp_path / "state")]
    argv += ["--blob=small=1024", f"--blob=big={1024 * 1024}"]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline() or "null")
        assert info, "the proxy process did not start"
        url = str(info["url"])
        token = httpx.get(f"{url}/token", auth=(info["machine_type"], info["token"]), timeout=30).json()["token"]
        bearer = {"Authorization": f"Bearer {token}"}
        blobs = f"{url}/v2/{info['repo']}/blobs"
        yield Target(
            url,
            int(url.rsplit(":", 1)[1]),
            f"/v2/{info['repo']}/blobs/{info['blobs']['small']}",
            bearer,
            {"headers": f"{url}/v2/", "body": f"{url}/token", "read": f"{blobs}/{info['blobs']['big']}"},
            8192,
        )
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def ui_target(tmp_path: Path) -> Iterator[Target]:
    """``hetflow ui`` on loopback (its defaults) over 30 finished runs."""
    home = tmp_path / "home"
    home.mkdir()
    store = Store(home / "state.db")
    for i in range(30):
        synthetic_run(store, home, f"run{i:05d}", steps=["a", "b"])
    store.close()
    with dashboard(home) as ui:
        yield Target(
            ui.base,
            ui.port,
            "/api/runs",
            {},
            {
                "headers": f"{ui.base}/api/runs",
                "body": f"{ui.base}/api/runs",
                "read": f"{ui.base}/static/vendor/chart.umd.min.js",  # 210 KB: more than a socket holds
            },
            4096,
        )


@dataclass(frozen=True)
class Outcome:
    before: Probes  # the other client's requests with no attack (the anchor)
    during: Probes
    after: Probes  # the anchor again, once the attack is over
    held: int  # the most attack connections the server held steadily while the attack ran
    cut: bool  # the server then cut every one while the attack still ran

    def line(self) -> str:
        return (
            f"held {self.held}, cut {self.cut}; before {self.before.summary()}, during {self.during.summary()}, "
            f"after {self.after.summary()}"
        )


def _attacked(target: Target, mode: str) -> Outcome:
    before = probe(target.base, target.path, target.headers, n=100)
    attack = replace(ATTACKS[mode], headers=target.headers, body_bytes=target.body_bytes)
    with slow_attack(attack, target.urls[mode]) as running:
        # on: its connections are on the server, or it is over already (it stops once the
        # server has closed every one, as a service that answers without reading a body does)
        on = lambda: held(target.port) >= ATTACK_ON or not running.running()  # noqa: E731
        with HeldWatch(target.port) as watch:
            wait_for(on, 60, f"slowhttptest's {attack.connections} connections reaching the server")
            during = _probed_during(target, before)
        at_full = watch.most()
        # slowhttptest runs longer than this wait (its -l): none of its connections closes
        # unless the server closes it
        try:
            wait_for(lambda: held(target.port) == 0, CUT_WITHIN_S[mode], "every slow connection cut")
            cut = True
        except AssertionError:
            cut = False
    after = probe(target.base, target.path, target.headers, n=100)
    return Outcome(before, during, after, at_full, cut)


def _probed_during(target: Target, before: Probes) -> Probes:
    """The other client's requests while the attack holds its connections: probed again, up
    to ROUNDS times, while a round's p99 misses the bound and none of its requests failed.  A
    server the attack starves misses it every round (the code before: 503s, or seconds); a
    loaded machine (the whole suite beside other work) misses it a round now and then."""
    bound = max(BOUND_S, 2 * before.p(0.99))
    during = probe(target.base, target.path, target.headers)
    for _ in range(ROUNDS - 1):
        if during.failures or during.p(0.99) <= bound:
            break
        during = probe(target.base, target.path, target.headers)
    return during


def _check(outcome: Outcome, mode: str) -> None:
    during = outcome.during
    assert not during.failures, f"{len(during.failures)} requests failed during the attack: {during.failures[:3]}"
    anchor = outcome.before.p(0.99)
    bound = max(BOUND_S, 2 * anchor)
    assert during.p(0.99) <= bound, (
        f"p99 {during.p(0.99) * 1000:.1f} ms during the attack, over {bound * 1000:.0f} ms "
        f"(anchor p99 {anchor * 1000:.1f} ms): {outcome.line()}"
    )
    assert outcome.held <= PER_ADDRESS, (
        f"the server held {outcome.held} slow {mode} connections from one address: {outcome.line()}"
    )
    assert outcome.cut, (
        f"the server still held slow {mode} connections {CUT_WITHIN_S[mode]:g} s after the attack opened them: "
        f"{outcome.line()}"
    )


@pytest.mark.parametrize("mode", ["headers", "body", "read"], ids=["slow-headers", "slow-body", "slow-read"])
def test_the_proxy_serves_others_and_cuts_slow_clients(tmp_path: Path, mode: str) -> None:
    with registry_target(tmp_path) as target:
        outcome = _attacked(target, mode)
    print(f"proxy, slow {mode}: {outcome.line()}")
    _check(outcome, mode)


@pytest.mark.parametrize("mode", ["headers", "body", "read"], ids=["slow-headers", "slow-body", "slow-read"])
def test_the_dashboard_serves_others_and_cuts_slow_clients(tmp_path: Path, mode: str) -> None:
    with ui_target(tmp_path) as target:
        outcome = _attacked(target, mode)
    print(f"dashboard, slow {mode}: {outcome.line()}")
    _check(outcome, mode)
