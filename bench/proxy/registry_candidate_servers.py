"""One candidate server of ``bench.proxy.registry_candidates`` in its own process, serving
the registry proxy's app as ``bench.proxy.registry_server``'s bare proxy builds it:

    python -m bench.proxy.registry_candidate_servers NAME STATE --blob=NAME=BYTES ...

(NAME: uvicorn, hypercorn, granian or nginx) prints the JSON line that module's ``_proxy``
reads once the blobs are in the cache, and serves until its stdin closes.  Each gets the
options nearest to what the shipped front (``hetflow.front``) enforces by ``Limits()``'s
defaults:

    uvicorn    limit_concurrency, timeout_keep_alive, h11_max_incomplete_event_size, backlog
    hypercorn  keep_alive_timeout, read_timeout, h11_max_incomplete_size, backlog (asyncio)
    granian    1 worker, HTTP/1, header_read_timeout, backpressure, backlog (its worker builds
               the app: ``granian_app``, from the environment)
    nginx      Debian's nginx, generated config (``nginx_conf``), in front of uvicorn on a Unix
               socket (``hetflow.front``'s backend, as HAProxy uses it)
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
from starlette.applications import Starlette
from tests.integration.slowhttp import wait_for

from hetflow.registry import Limits

__all__ = ["BACKLOG", "HEADER_BYTES", "LIMITS", "SBIN", "granian_app", "nginx_conf", "serve"]

LIMITS = Limits()  # what the shipped front enforces; each candidate gets its nearest options
BACKLOG = 4096  # as hetflow's own listening socket (registry.serving.listen_socket)
HEADER_BYTES = 16 * 1024  # h11's default incomplete-event cap, HAProxy's default buffer
SBIN = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/local/sbin"])
BLOBS_FILE = "bench-blobs.json"  # the app's blob digests, for a server whose worker builds it
STATE_ENV, BLOBS_ENV = "HETFLOW_BENCH_STATE", "HETFLOW_BENCH_BLOBS"
MODULE = "bench.proxy.registry_candidate_servers"
Stop = Callable[[], None]


def _app(state: Path, specs: list[str]) -> tuple[Starlette, dict[str, str]]:
    """The proxy app as ``bench.proxy.registry_server``'s bare proxy builds it, and its blobs."""
    from hetflow.registry import FakeRegistry, MachineTypeDecl, Settings, create_app
    from hetflow.registry.fakes.fakeproxy import MACHINE_TYPE, REPO

    fake = FakeRegistry()
    fake.push_builds(REPO, "v1", {"generic": []})
    blobs = {}
    for spec in specs:
        name, _, size = spec.removeprefix("--blob=").partition("=")
        blobs[name] = fake.add_blob(os.urandom(int(size)))
    settings = Settings(
        upstream="http://upstream.test", state_dir=state, machine_types=(MachineTypeDecl(profile=MACHINE_TYPE),)
    )
    app = create_app(settings, transport=fake.transport())
    (state / BLOBS_FILE).write_text(json.dumps(blobs))
    return app, blobs


def granian_app() -> Starlette:
    """granian's factory: the app, built in its worker from the environment ``_granian`` set."""
    return _app(Path(os.environ[STATE_ENV]), os.environ[BLOBS_ENV].split())[0]


def _announce(state: Path, url: str) -> None:
    """Once ``url`` answers: the blobs into the cache, then the JSON line ``_proxy`` reads."""
    from hetflow.registry.fakes.fakeproxy import MACHINE_TYPE, REPO

    def answers() -> bool:
        try:
            httpx.get(f"{url}/v2/", timeout=2)
        except httpx.HTTPError:
            return False
        return (state / BLOBS_FILE).exists()

    wait_for(answers, 60, f"the server answering on {url}")
    blobs = json.loads((state / BLOBS_FILE).read_text())
    token = (state / "tokens" / MACHINE_TYPE).read_text().strip()
    bearer = httpx.get(f"{url}/token", auth=(MACHINE_TYPE, token), timeout=30).json()["token"]
    for digest in blobs.values():
        answer = httpx.get(f"{url}/v2/{REPO}/blobs/{digest}", headers={"Authorization": f"Bearer {bearer}"}, timeout=60)
        answer.raise_for_status()
    info = {"url": url, "pid": os.getpid(), "machine_type": MACHINE_TYPE, "token": token, "repo": REPO, "blobs": blobs}
    print(json.dumps(info), flush=True)


def _uvicorn(app: Starlette, port: int, runtime: Path) -> Stop:
    import uvicorn

    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http="h11",
        log_level="error",
        access_log=False,
        limit_concurrency=LIMITS.max_connections,
        timeout_keep_alive=int(LIMITS.keepalive_timeout_s),
        h11_max_incomplete_event_size=HEADER_BYTES,
        backlog=BACKLOG,
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=15)

    return stop


def _hypercorn(app: Starlette, port: int, runtime: Path) -> Stop:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.keep_alive_timeout = LIMITS.keepalive_timeout_s
    config.read_timeout = int(LIMITS.request_timeout_s)
    config.h11_max_incomplete_size = HEADER_BYTES
    config.backlog = BACKLOG
    config.graceful_timeout = 5
    config.loglevel = "ERROR"
    loop = asyncio.new_event_loop()
    done = asyncio.Event()
    main = serve(app, config, shutdown_trigger=done.wait)  # type: ignore[arg-type]
    thread = threading.Thread(target=loop.run_until_complete, args=(main,), daemon=True)
    thread.start()

    def stop() -> None:
        loop.call_soon_threadsafe(done.set)
        thread.join(timeout=15)

    return stop


def nginx_conf(runtime: Path, port: int, app_socket: Path) -> str:
    """nginx in front of the app's Unix socket with the front's limits, as near as it has them."""
    from hetflow.front.haproxy import CLIENT_HEADER, SERVER_HEADER

    L, user = LIMITS, pwd.getpwuid(os.geteuid()).pw_name
    temp = "".join(
        f"    {kind}_temp_path {runtime / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""user {user};
worker_processes 2;
worker_rlimit_nofile 16384;
daemon off;
pid {runtime / "nginx.pid"};
error_log {runtime / "error.log"} error;
events {{ worker_connections 8192; }}
http {{
    access_log off;
{temp}    client_header_timeout {L.request_timeout_s:g}s;
    client_body_timeout {L.request_timeout_s:g}s;
    send_timeout {L.client_idle_timeout_s:g}s;
    keepalive_timeout {L.keepalive_timeout_s:g}s;
    client_max_body_size {L.max_body_bytes // 1024}k;
    client_body_buffer_size {L.max_body_bytes // 1024}k;
    limit_conn_zone $binary_remote_addr zone=per_address:10m;
    limit_conn per_address {L.max_connections_per_client};
    limit_conn_status 429;
    upstream app {{
        server unix:{app_socket} max_conns={L.max_connections};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port} backlog={BACKLOG};
        location / {{
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header {CLIENT_HEADER} "$remote_addr $remote_port";
            proxy_set_header {SERVER_HEADER} "$server_addr $server_port";
            proxy_read_timeout 3660s;
        }}
    }}
}}
"""


def _nginx(app: Starlette, port: int, runtime: Path) -> Stop:
    from hetflow.front.backend import Backend

    backend = Backend(app, runtime / "app.sock", log_level="error", name="bench-nginx-app")
    backend.start()
    conf = runtime / "nginx.conf"
    conf.write_text(nginx_conf(runtime, port, backend.path))
    nginx = shutil.which("nginx", path=SBIN) or "nginx"
    with (runtime / "nginx.out").open("wb") as out:
        argv = [nginx, "-e", str(runtime / "error.log"), "-p", str(runtime), "-c", str(conf)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def stop() -> None:
        proc.terminate()  # nginx: SIGTERM is its fast shutdown
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        backend.stop()

    return stop


def _granian(state: Path, specs: list[str], port: int) -> None:
    """granian in the foreground (it wants the main thread's signals), its worker (a process)
    building the app; a thread announces, waits for stdin to close, then stops it as Ctrl-C would."""
    from granian import Granian
    from granian.constants import HTTPModes, Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels

    os.environ[STATE_ENV], os.environ[BLOBS_ENV] = str(state), " ".join(specs)
    # spawn, not fork: a worker forked while the announcing thread holds a lock hangs for good
    multiprocessing.set_start_method("spawn", force=True)
    server = Granian(
        f"{MODULE}:granian_app",
        address="127.0.0.1",
        port=port,
        interface=Interfaces.ASGI,
        workers=1,
        http=HTTPModes.http1,
        websockets=False,
        backlog=BACKLOG,
        backpressure=LIMITS.max_connections,
        http1_settings=HTTP1Settings(header_read_timeout=int(LIMITS.request_timeout_s * 1000), keep_alive=True),
        log_level=LogLevels.error,
        factory=True,
        workers_kill_timeout=10,
    )

    def announce_then_stop() -> None:
        try:
            _announce(state, f"http://127.0.0.1:{port}")
            sys.stdin.read()
        finally:
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=announce_then_stop, daemon=True).start()
    server.serve()


def serve(name: str, state: Path, specs: list[str]) -> None:
    from tests.integration.hfkit import free_port

    port = free_port()
    state.mkdir(parents=True, exist_ok=True)
    if name == "granian":
        _granian(state, specs, port)
        return
    runtime = Path(tempfile.mkdtemp(prefix="hf-cand-"))  # short: a Unix socket's path is short
    app, _ = _app(state, specs)
    stop = {"uvicorn": _uvicorn, "hypercorn": _hypercorn, "nginx": _nginx}[name](app, port, runtime)
    try:
        _announce(state, f"http://127.0.0.1:{port}")
        sys.stdin.read()
    finally:
        stop()
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    serve(sys.argv[1], Path(sys.argv[2]), sys.argv[3:])
