"""``hetflow ui``: serve the live dashboard (``hetflow.ui``, imported only here: it loads
starlette and uvicorn, which no other command but the registry needs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from hetflow.cli.common import err
from hetflow.config import hetflow_home
from hetflow.errors import UsageError


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)


def ui(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything not loopback needs the token."),
    port: int = typer.Option(8786, "--port", min=0, max=65535, help="Port to listen on."),
    token: str | None = typer.Option(
        None, "--token", envvar="HETFLOW_UI_TOKEN", help="Token to require (default: made and printed when needed)."
    ),
    actions: bool = typer.Option(
        False, "--actions", help="Allow stop, resume and retry from the page (needs a token)."
    ),
    show_env: bool = typer.Option(False, "--show-env", help="Show steps' environment values (else only their names)."),
    root: Path = typer.Option(Path("."), "--root", help="Where the plans view finds workflow, cluster, catalog files."),
    run_id: str | None = typer.Option(None, "--open", help="Print the URL of this run's page too."),
) -> None:
    """Serve a live web dashboard of runs, plans, nodes and GPUs (Ctrl-C stops it)."""
    from hetflow.state import Store
    from hetflow.ui import UiConfig, bind, serve

    if not root.is_dir():
        raise UsageError(f"--root {root}: not a directory; give the directory holding your workflows")
    config = UiConfig(
        store_path=hetflow_home() / "state.db",
        host=host,
        port=port,
        token=token,
        actions=actions,
        show_env=show_env,
        root=root,
    ).checked()
    if not config.store_path.exists():
        Store(config.store_path).close()  # nothing has run yet: an empty store, so the page shows no runs
    reader = Store(config.store_path, read_only=True)  # a store that cannot be read fails here, before the URL
    if run_id is not None:
        run_id = reader.resolve_run_id(run_id)
    reader.close()
    sock = bind(config.host, config.port)
    config = dataclasses.replace(config, port=sock.getsockname()[1])  # --port 0: the one the system gave
    err.print(f"hetflow ui: {config.url()}", highlight=False, soft_wrap=True)
    if run_id is not None:
        err.print(f"run {run_id}: {config.url()}#/runs/{run_id}", highlight=False, soft_wrap=True)
    if config.token and token is None:
        err.print("(the token was made for this session; --token or HETFLOW_UI_TOKEN sets one)", highlight=False)
    serve(config, sock=sock)
