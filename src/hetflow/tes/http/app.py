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


def create_app(service: TesService, *, version: str = "0") -> Starlette:
    async def off(call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, call)

    def caller_of(request: Request) -> Caller:
        if not service.config.tokens:
            return Caller(LOCAL_USER, True)
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        found = who(service.store, token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if found is None:
            raise HttpError(
                401, "give a valid bearer token (Authorization: Bearer TOKEN; 'hetflow tes token add USER')"
            )
        return Caller(*found)

    def handler(fn: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[JSONResponse]]:
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

    @handler
    async def service_info(request: Request) -> Any:
        info = ServiceInfo(
            id="org.hetflow.tes",
            name="hetflow TES",
            description="hetflow's GA4GH Task Execution Service: tasks run as hetflow runs in hardened containers",
            organization=Organization(name="hetflow", url="https://github.com/hetflow"),
            version=version,
            storage=[f"file://{r}" for r in service.config.file_roots],
            tesResources_backend_parameters=list(SUPPORTED_PARAMETERS),
        )
        return info.model_dump(mode="json", exclude_none=True)

    @handler
    async def create(request: Request) -> Any:
        caller = await off(lambda: caller_of(request))
        try:
            task = Task.model_validate_json(await request.body())
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "body"
            raise HttpError(400, f"{where}: {first['msg']}") from None
        task_id = await off(lambda: service.create(task, caller))
        return {"id": task_id}

    @handler
    async def list_tasks(request: Request) -> Any:
        caller = await off(lambda: caller_of(request))
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
            lambda: service.page(
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

    @handler
    async def get_task(request: Request) -> Any:
        caller = await off(lambda: caller_of(request))
        view = view_of(request)
        row = await off(lambda: service.get(request.path_params["id"], caller))
        if row is None:
            raise HttpError(404, f"no task {request.path_params['id']!r}")
        return render(as_task(row), view)

    @handler
    async def cancel(request: Request) -> Any:
        caller = await off(lambda: caller_of(request))
        if not await off(lambda: service.cancel(request.path_params["id"], caller)):
            raise HttpError(404, f"no task {request.path_params['id']!r}")
        return {}

    routes = [
        Route(f"{PREFIX}/service-info", service_info, methods=["GET"]),
        Route(f"{PREFIX}/tasks", create, methods=["POST"]),
        Route(f"{PREFIX}/tasks", list_tasks, methods=["GET"]),
        Route(PREFIX + "/tasks/{id}:cancel", cancel, methods=["POST"]),
        Route(PREFIX + "/tasks/{id}", get_task, methods=["GET"]),
    ]
    return Starlette(routes=routes)
