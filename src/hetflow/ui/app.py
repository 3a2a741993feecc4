"""``hetflow ui``: the dashboard as an ASGI app (starlette), and ``serve`` to run it.

    GET  /                                  the page (share/ui/index.html); /static/*: its files
    GET  /api/config                        version, whether actions are on
    GET  /api/runs?state=&name=&limit=&offset=      a page of runs (``hetflow ps --json`` items)
    GET  /api/runs/{id}                     one run (``hetflow show --json``) with its DAG
    GET  /api/runs/{id}/events?after=N      its events as they are stored (text/event-stream)
    GET  /api/runs/{id}/gantt.svg           plan and actual on one time axis
    GET  /api/runs/{id}/steps/{step}/log    a step's log tail; .../log/stream follows it
    GET  /api/nodes                         this machine (``hetflow nodes --json``), GPU holders
    GET  /api/clusters                      the node classes of live Slurm / Ray runs, what runs there
    GET  /api/files                         workflow, cluster and catalog files under --root
    GET  /api/plan?workflow=&cluster=&objective=    ``hetflow plan --json --explain``
    GET  /api/pareto?workflow=&catalog=             ``hetflow cluster plan --json``, every point
    POST /api/runs/{id}/stop | resume | steps/{step}/retry   with --actions only

The store is opened read-only (one connection per worker thread): the dashboard cannot
change a run.  Actions run the CLI command a user would type, in a child process.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

import hetflow
from hetflow.config import SHARE
from hetflow.errors import HetflowError, StateError
from hetflow.execute import stored_plan
from hetflow.front import listen_socket
from hetflow.inventory import discover
from hetflow.report import timeline_svg
from hetflow.state import Store
from hetflow.ui.auth import Gate, UiConfig
from hetflow.ui.limits import Streams, client_address
from hetflow.ui.planning import Planner
from hetflow.ui.streams import ATTEMPT_OVER, MAX_LOG_BYTES, log_events, log_path, log_tail, run_events
from hetflow.ui.tasks import tasks_page, tasks_query
from hetflow.ui.views import (
    MAX_INT,
    BadRequest,
    Busy,
    Forbidden,
    RunCache,
    clean_param,
    cluster_nodes,
    int_param,
    nodes_json,
    page_query,
    run_detail,
    runs_page,
    under_root,
    yaml_files,
)

PAGE = SHARE / "ui"
log = logging.getLogger("hetflow.ui")
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
ACTION_TIMEOUT = 60.0
# Secrets of the dashboard (and of a proxy started beside it) that its actions' processes never get.
CHILD_ENV_DROPPED = frozenset({"HETFLOW_UI_TOKEN", "HETFLOW_REGISTRY_ADMIN_TOKEN"})
NO_ATTEMPT_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="400" height="30"><text x="4" y="20">no attempt started</text></svg>'
)

Handler = Callable[[Request], Awaitable[Response]]


class Reader:
    """The read-only store, one connection per thread (sqlite3 connections stay in theirs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        Store(path, read_only=True).close()  # fail at start, with the store's message, if it cannot be read

    def __call__(self) -> Store:
        store: Store | None = getattr(self._local, "store", None)
        if store is None:
            store = self._local.store = Store(self.path, read_only=True)
        return store


def finite(data: Any) -> Any:
    """``data`` with infinities and NaNs as null: JSON has no such numbers (a plan with no
    deadline carries ``inf``), and a browser's JSON.parse refuses Python's ``Infinity``."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [finite(v) for v in data]
    return data


def _json_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _guarded(fn: Callable[[Request], Any]) -> Handler:
    """A sync endpoint run in a worker thread, its errors as JSON: bad input 400, an
    unknown run or step 404, every other HetflowError 400 (never a traceback)."""

    async def endpoint(request: Request) -> Response:
        try:
            out = await run_in_threadpool(fn, request)
        except Forbidden as exc:
            return _json_error(403, str(exc))
        except Busy as exc:
            return _json_error(503, str(exc), {"Retry-After": "2"})
        except BadRequest as exc:
            return _json_error(400, str(exc))
        except (StateError, LookupError) as exc:
            return _json_error(404, str(exc).strip("'\""))
        except HetflowError as exc:
            return _json_error(400, str(exc))
        except Exception as exc:  # the last guard: the page shows a message, never a traceback
            log.exception("hetflow ui: %s %s", request.method, request.url.path)
            return _json_error(500, f"internal error: {type(exc).__name__}: {exc} (a bug in hetflow: please report it)")
        return out if isinstance(out, Response) else JSONResponse(finite(out))

    return endpoint


def _offset(raw: str | None) -> int | None:
    """A log byte offset from a query or a Last-Event-ID (None: start from the tail)."""
    return None if not raw else int_param("offset", raw, 0, 0, MAX_INT)


MAX_RANK = 4096  # replicas of a gang step
MAX_ATTEMPT = 1_000_000


def _stream(streams: Streams, request: Request, body: AsyncIterator[str]) -> Response:
    """``body`` as an event stream, counted against ``streams`` while it is open."""
    address = client_address(request.scope.get("client"))
    refused = streams.refusal(address)
    if refused is not None:
        return _json_error(*refused, {"Retry-After": "5"})
    streams.opened(address)
    return _CountedStream(body, streams, address)


class _CountedStream(StreamingResponse):
    def __init__(self, body: AsyncIterator[str], streams: Streams, address: str) -> None:
        super().__init__(body, media_type="text/event-stream", headers=SSE_HEADERS)
        self._streams, self._address = streams, address

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._streams.closed(self._address)


def _step_query(reader: Reader, request: Request) -> tuple[Store, str, str, int | None, int]:
    """The store, run id, step, attempt (None: the last) and rank a step's log request names."""
    store = reader()
    rid = store.resolve_run_id(request.path_params["run_id"])
    step = request.path_params["step"]
    store.step(rid, step)  # 404 for a step the run does not have
    q = request.query_params
    attempt = int_param("attempt", q["attempt"], 1, 1, MAX_ATTEMPT) if q.get("attempt") else None
    rank = int_param("rank", q.get("rank"), 0, 0, MAX_RANK)
    return store, rid, step, attempt, rank


def _run_routes(config: UiConfig, reader: Reader) -> list[Route]:
    """What the runs pages read: the config, a page of runs, one run, its Gantt chart, a step's log."""
    runs_read = RunCache()

    def api_config(request: Request) -> dict[str, Any]:
        return {
            "version": hetflow.__version__,
            "actions": config.actions,
            "home": str(config.store_path.parent),
            "show_env": config.show_env,
        }

    def runs(request: Request) -> dict[str, Any]:
        q = request.query_params
        state, name, limit, offset = page_query(q.get("state"), q.get("name"), q.get("limit"), q.get("offset"))
        return runs_page(reader(), runs_read, state, name, limit, offset)

    def tes_tasks(request: Request) -> dict[str, Any]:
        q = request.query_params
        state, limit, offset = tasks_query(q.get("state"), q.get("limit"), q.get("offset"))
        return tasks_page(reader(), state, limit, offset)

    def run(request: Request) -> dict[str, Any]:
        return run_detail(reader(), request.path_params["run_id"], runs_read, show_env=config.show_env)

    def gantt(request: Request) -> Response:
        store = reader()
        rid = store.resolve_run_id(request.path_params["run_id"])
        svg = timeline_svg(store.run(rid), store.attempts(rid), stored_plan(store, rid))
        return Response(svg or NO_ATTEMPT_SVG, media_type="image/svg+xml")

    def log(request: Request) -> dict[str, Any]:
        store, rid, step, attempt, rank = _step_query(reader, request)
        path, number, state = log_path(store, rid, step, attempt, rank)
        lines, end = log_tail(path, _offset(request.query_params.get("offset")))
        return {
            "lines": lines,
            "offset": end,  # where to go on from (?offset=): one answer reads at most max_bytes of the log
            "max_bytes": MAX_LOG_BYTES,
            "attempt": number,
            "rank": rank,
            "done": state in ATTEMPT_OVER,
        }

    return [
        Route("/api/config", _guarded(api_config)),
        Route("/api/runs", _guarded(runs)),
        Route("/api/tes/tasks", _guarded(tes_tasks)),
        Route("/api/runs/{run_id}", _guarded(run)),
        Route("/api/runs/{run_id}/gantt.svg", _guarded(gantt)),
        Route("/api/runs/{run_id}/steps/{step}/log", _guarded(log)),
    ]


def _stream_routes(config: UiConfig, reader: Reader) -> list[Route]:
    """The live feeds (server-sent events): a run's events and a step's log as it grows."""
    streams = Streams(config.max_streams, config.max_streams_per_client)

    async def events(request: Request) -> Response:
        try:
            rid = await run_in_threadpool(lambda: reader().resolve_run_id(request.path_params["run_id"]))
            given = request.headers.get("last-event-id") or request.query_params.get("after")
            after = int_param("after", given, 0, 0, MAX_INT)
        except StateError as exc:
            return _json_error(404, str(exc))
        except BadRequest as exc:
            return _json_error(400, f"{exc} (an event id; Last-Event-ID is read the same way)")
        return _stream(streams, request, run_events(reader, rid, after))

    async def log_stream(request: Request) -> Response:
        try:
            _, rid, step, attempt, rank = await run_in_threadpool(_step_query, reader, request)
            await run_in_threadpool(lambda: log_path(reader(), rid, step, attempt, rank))
            offset = _offset(request.headers.get("last-event-id") or request.query_params.get("offset"))
        except BadRequest as exc:
            return _json_error(400, str(exc))
        except (StateError, LookupError) as exc:
            return _json_error(404, str(exc).strip("'\""))
        return _stream(streams, request, log_events(reader, rid, step, attempt, rank, offset))

    return [
        Route("/api/runs/{run_id}/events", events),
        Route("/api/runs/{run_id}/steps/{step}/log/stream", log_stream),
    ]


def _machine_routes(config: UiConfig, reader: Reader) -> list[Route]:
    """The machines and the planning pages: this machine, live clusters, the files under
    --root, a plan and a Pareto front."""
    root = config.root.resolve()
    planner = Planner(root, config.max_planning)

    def nodes(request: Request) -> list[dict[str, Any]]:
        return nodes_json(discover(config.store_path.parent), reader().leases())

    def clusters(request: Request) -> list[dict[str, Any]]:
        return cluster_nodes(reader())

    def files(request: Request) -> dict[str, list[str]]:
        return yaml_files(root)

    def plan(request: Request) -> dict[str, Any]:
        q = request.query_params
        workflow = under_root(root, q.get("workflow"), "workflow")
        cluster = under_root(root, q.get("cluster"), "cluster")
        objective = clean_param("objective", q.get("objective")) or "makespan"
        return planner.plan(reader(), workflow, cluster, objective)

    def pareto(request: Request) -> dict[str, Any]:
        q = request.query_params
        return planner.pareto(
            under_root(root, q.get("workflow"), "workflow"), under_root(root, q.get("catalog"), "catalog")
        )

    return [
        Route("/api/nodes", _guarded(nodes)),
        Route("/api/clusters", _guarded(clusters)),
        Route("/api/files", _guarded(files)),
        Route("/api/plan", _guarded(plan)),
        Route("/api/pareto", _guarded(pareto)),
    ]


def _action_routes(config: UiConfig, reader: Reader) -> list[Route]:
    """Stop, resume and retry: the CLI command a user would type (403 without --actions)."""

    def action(build: Callable[[str, Request], list[str]]) -> Handler:
        def do(request: Request) -> dict[str, Any]:
            if not config.actions:
                raise Forbidden("actions are off; start the dashboard with 'hetflow ui --actions'")
            rid = reader().resolve_run_id(request.path_params["run_id"])
            return run_cli(build(rid, request), config.store_path.parent)

        return _guarded(do)

    return [
        Route("/api/runs/{run_id}/stop", action(lambda rid, r: ["stop", rid]), methods=["POST"]),
        Route("/api/runs/{run_id}/resume", action(lambda rid, r: ["resume", rid, "--detach"]), methods=["POST"]),
        Route(
            "/api/runs/{run_id}/steps/{step}/retry",
            action(lambda rid, r: ["resume", rid, "--step", r.path_params["step"], "--detach"]),
            methods=["POST"],
        ),
    ]


def create_app(config: UiConfig) -> Starlette:
    """The dashboard for ``config`` (already ``checked()``: a token where one is needed)."""
    reader = Reader(config.store_path)

    async def index(request: Request) -> Response:
        return FileResponse(PAGE / "index.html", headers={"Cache-Control": "no-store"})

    routes: list[Route | Mount] = [
        Route("/", index),
        *_run_routes(config, reader),
        *_stream_routes(config, reader),
        *_machine_routes(config, reader),
        *_action_routes(config, reader),
        Mount("/static", app=StaticFiles(directory=PAGE, check_dir=False), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Gate, config=config)
    return app


def run_cli(args: list[str], home: Path) -> dict[str, Any]:
    """Run ``hetflow ARGS`` as the user would, with this dashboard's HETFLOW_HOME and none of
    its secrets: a resume leaves the run's executor running, and what it inherits any process
    of the same user can read in /proc/PID/environ (issue 38: it held HETFLOW_UI_TOKEN)."""
    env = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROPPED}
    env["HETFLOW_HOME"] = str(home)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hetflow.cli.main", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=ACTION_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise HetflowError(f"'hetflow {' '.join(args)}' did not finish in {ACTION_TIMEOUT:.0f} s") from None
    message = (done.stdout + done.stderr).strip()
    if done.returncode != 0:
        raise HetflowError(f"'hetflow {' '.join(args)}' failed: {message}")
    return {"ok": True, "message": message, "command": ["hetflow", *args]}


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a taken port or a bad address is a clear error
    before the HTTP front starts on it (``serving``; ``front.listen_socket`` in the dashboard's words)."""
    return listen_socket(host, port, named=f"--host {host!r}", instead="another --port (or --port 0)", backlog=128)
