"""The TES v1.1 API as a Starlette app, under ``/ga4gh/tes/v1``: service-info, create, list,
get and cancel.  Errors are JSON ``{"msg": ..., "status_code": ...}`` (as Funnel and TESK
answer), a 400 naming the field; another user's task is a 404, as a task that does not exist.

With tokens (``auth: tokens``), each request carries ``Authorization: Bearer TOKEN``
(``hetflow tes token add USER``); without, every request is the one local user, an admin."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from hetflow.tes.messages import Organization, ServiceInfo, Task, View, render
from hetflow.tes.service import LOCAL_USER, SUPPORTED_PARAMETERS, Caller, Refused, TesService, as_task, who

PREFIX = "/ga4gh/tes/v1"
MAX_PAGE = 2048
DEFAULT_PAGE = 256
T = TypeVar("T")


class HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"msg": message, "status_code": status}, status_code=status)


async def off(call: Callable[[], T]) -> T:
    """``call`` on a worker thread: the store's reads and writes block."""
    return await asyncio.get_running_loop().run_in_executor(None, call)


def handler(fn: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[JSONResponse]]:
    """An endpoint whose refusals (``HttpError``, ``Refused``) become the API's JSON errors."""

    @functools.wraps(fn)
    async def wrapped(request: Request) -> JSONResponse:
        try:
            result = await fn(request)
        except HttpError as exc:
            return error(exc.status, str(exc))
        except Refused as exc:
            return error(400, str(exc))
        return result if isinstance(result, JSONResponse) else JSONResponse(result)

    return wrapped


def view_of(request: Request) -> View:
    raw = request.query_params.get("view", "MINIMAL")
    try:
        return View(raw)
    except ValueError:
        raise HttpError(400, f"view {raw!r}: give MINIMAL, BASIC or FULL") from None


class Api:
    """The endpoints, over one ``TesService``."""

    def __init__(self, service: TesService, version: str) -> None:
        self.service, self.version = service, version

    def caller_of(self, request: Request) -> Caller:
        if not self.service.config.tokens:
            return Caller(LOCAL_USER, True)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        found = who(self.service.store, token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if found is None:
            raise HttpError(
                401, "give a valid bearer token (Authorization: Bearer TOKEN; 'hetflow tes token add USER')"
            )
        return Caller(*found)

    async def service_info(self, request: Request) -> Any:
        info = ServiceInfo(
            id="org.hetflow.tes",
            name="hetflow TES",
            description="hetflow's GA4GH Task Execution Service: tasks run as hetflow runs in hardened containers",
            organization=Organization(name="hetflow", url="https://github.com/hetflow"),
            version=self.version,
            storage=[f"file://{r}" for r in self.service.config.file_roots]
            + (["s3://"] if self.service.config.s3 is not None else []),
            tesResources_backend_parameters=list(SUPPORTED_PARAMETERS),
        )
        return info.model_dump(mode="json", exclude_none=True)

    async def create(self, request: Request) -> Any:
        caller = await off(lambda: self.caller_of(request))
        try:
            task = Task.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise HttpError(400, f"{where}: {first['msg']}") from None
        task_id = await off(lambda: self.service.create(task, caller))
        return {"id": task_id}

    async def list_tasks(self, request: Request) -> Any:
        caller = await off(lambda: self.caller_of(request))
        q = request.query_params
        view = view_of(request)
        try:
            size = min(int(q.get("page_size", DEFAULT_PAGE)), MAX_PAGE)
            token = q.get("page_token") or None
            if token is not None:
                int(token)
        except ValueError:
            raise HttpError(400, "page_size must be a whole number and page_token one this server gave") from None
        if size < 1:
            raise HttpError(400, "page_size must be 1 or more")
        keys, values = q.getlist("tag_key"), q.getlist("tag_value")
        tags = [(k, values[i] if i < len(values) else "") for i, k in enumerate(keys)]
        page = await off(
            lambda: self.service.page(
                caller,
                page_size=size,
                token=token,
                name_prefix=q.get("name_prefix", ""),
                state=q.get("state") or None,
                tags=tags,
            )
        )
        body: dict[str, Any] = {"tasks": [render(as_task(r), view) for r in page.tasks]}
        if page.next_token:
            body["next_page_token"] = page.next_token
        return body

    async def get_task(self, request: Request) -> Any:
        caller = await off(lambda: self.caller_of(request))
        view = view_of(request)
        row = await off(lambda: self.service.get(request.path_params["id"], caller))
        if row is None:
            raise HttpError(404, f"no task {request.path_params['id']!r}")
        return render(as_task(row), view)

    async def cancel(self, request: Request) -> Any:
        caller = await off(lambda: self.caller_of(request))
        if not await off(lambda: self.service.cancel(request.path_params["id"], caller)):
            raise HttpError(404, f"no task {request.path_params['id']!r}")
        return {}


def create_app(service: TesService, *, version: str = "0") -> Starlette:
    api = Api(service, version)
    routes = [
        Route(f"{PREFIX}/service-info", handler(api.service_info), methods=["GET"]),
        Route(f"{PREFIX}/tasks", handler(api.create), methods=["POST"]),
        Route(f"{PREFIX}/tasks", handler(api.list_tasks), methods=["GET"]),
        Route(PREFIX + "/tasks/{id}:cancel", handler(api.cancel), methods=["POST"]),
        Route(PREFIX + "/tasks/{id}", handler(api.get_task), methods=["GET"]),
    ]
    return Starlette(routes=routes)
