"""``hetflow tes``: serve the GA4GH Task Execution Service (``hetflow.tes``, imported only
here), issue users' tokens, and explain the queue."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from hetflow.cli.common import console, err
from hetflow.config import hetflow_home
from hetflow.execute import DEFAULT_BACKEND

tes_app = typer.Typer(help="hetflow as a GA4GH Task Execution Service (TES v1.1).", no_args_is_help=True)
token_app = typer.Typer(help="Users' bearer tokens (auth: tokens in the config).", no_args_is_help=True)
tes_app.add_typer(token_app, name="token")


def register(app: typer.Typer) -> None:
    app.add_typer(tes_app, name="tes")


@tes_app.command("serve")
def serve(
    listen: str = typer.Option("127.0.0.1:8000", "--listen", metavar="HOST:PORT", help="Address to serve the API on."),
    config: Path | None = typer.Option(None, "--config", metavar="FILE", help="The service's settings (YAML)."),
    backend: str = typer.Option(
        DEFAULT_BACKEND, "--backend", help="Where executors run: local, or a cluster (its settings: run_settings)."
    ),
    file_root: list[Path] = typer.Option(
        [], "--file-root", metavar="DIR", help="file:// inputs and outputs may be under DIR (repeatable)."
    ),
) -> None:
    """Serve the TES API; tasks run as hetflow runs (Ctrl-C stops it; queued tasks wait in the store)."""
    from hetflow.errors import UsageError
    from hetflow.execute import load_settings, make_backend
    from hetflow.inventory import discover
    from hetflow.tes import TesService, load_config
    from hetflow.tes import serve as serve_tes

    settings = load_config(config, backend=backend, file_roots=tuple(file_root))
    home = hetflow_home()
    # the backend as `hetflow run` makes it: from the registry, with its settings file's section
    try:
        run = load_settings(settings.run_settings, home, os.environ, backend=backend)
    except UsageError as exc:
        where = f"run_settings: {settings.run_settings}" if settings.run_settings else f"{home / 'config.yaml'}"
        raise UsageError(f"{exc} (hetflow tes serve reads the backend's settings from {where}; see --config)") from None
    make_backend(run).check()  # a cluster that cannot be reached is said now, not per task
    node = discover(home) if run.leases_here else None  # a cluster's engine assigns its GPUs
    service = TesService(settings, home, backend=lambda: make_backend(run), node=node)
    auth = "bearer tokens" if settings.tokens else "no auth: every request is the local user"
    err.print(f"hetflow tes: http://{listen}/ga4gh/tes/v1 ({auth})", highlight=False, soft_wrap=True)
    serve_tes(service, listen, workdir=home)


@tes_app.command("queue")
def queue(
    explain: bool = typer.Option(False, "--explain", help="Say why each queued task waits or starts."),
    config: Path | None = typer.Option(None, "--config", metavar="FILE", help="The service's settings (YAML)."),
) -> None:
    """The queued tasks in the order they would start (fair share between users, their limits)."""
    from hetflow.inventory import discover
    from hetflow.tes import TesService, load_config

    service = TesService(load_config(config), hetflow_home(), node=discover(hetflow_home()))
    decisions = service.explain()
    if not decisions:
        console.print("no task is queued", highlight=False)
    for i, d in enumerate(decisions, 1):
        line = f"{i:>4}. {d.task_id}  {d.owner}"
        console.print(f"{line}  {d.why}" if explain else line, highlight=False, soft_wrap=True)


@token_app.command("add")
def token_add(
    user: str = typer.Argument(..., metavar="USER", help="The user the token is for."),
    admin: bool = typer.Option(False, "--admin", help="The user sees and cancels every user's tasks."),
) -> None:
    """Make USER a token (replacing an older one) and print it once; only its hash is kept."""
    from hetflow.state import Store
    from hetflow.tes import add_token

    store = Store(hetflow_home() / "state.db")
    token = add_token(store, user, admin=admin)
    console.print(token, highlight=False)
    err.print(f"the token of {user}: shown once, kept only as its hash", highlight=False)
