"""``hetflow ui``: serve the live dashboard (``hetflow.ui``, imported only here: it loads
starlette and uvicorn, which no other command but the registry needs)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer

from hetflow.cli.common import err
from hetflow.config import hetflow_home
from hetflow.errors import UsageError


def _read_token(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"--token-file {path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    token = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not token:
        raise UsageError(f"--token-file {path}: the file is empty; write the token on its first line")
    return token


def register(app: typer.Typer) -> None:
    app.command("ui")(ui)


def ui(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; anything not loopback needs the token."),
    port: int = typer.Option(8786, "--port", min=0, max=65535, help="Port to listen on."),
    token: str | None = typer.Option(
        None,
        "--token",
        envvar="HETFLOW_UI_TOKEN",
        help="Token to require (default: made and printed when needed). On the command line it shows in 'ps': "
        "prefer HETFLOW_UI_TOKEN or --token-file.",
    ),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="Read the token from this file (its first line), kept out of 'ps'."
    ),
    actions: bool = typer.Option(
        False, "--actions", help="Allow stop, resume and retry from the page (needs a token)."
    ),
    show_env: bool = typer.Option(False, "--show-env", help="Show steps' environment values (else only their names)."),
    root: Path = typer.Option(Path("."), "--root", help="Where the plans view finds workflow, cluster, catalog files."),
    run_id: str | None = typer.Option(None, "--open", help="Print the URL of this run's page too."),
    streams_per_client: int = typer.Option(
        16, "--streams-per-client", min=1, help="Event streams one client address may hold open (of 64 in all)."
    ),
    wrong_tokens: int = typer.Option(
        10, "--wrong-tokens", min=1, help="Wrong tokens one client address may give a minute; then 429."
    ),
) -> None:
    """Serve a live web dashboard of runs, plans, nodes and GPUs (Ctrl-C stops it)."""
    from hetflow.state import Store
    from hetflow.ui import UiConfig, bind, serve

    if not root.is_dir():
        raise UsageError(f"--root {root}: not a directory; give the directory holding your workflows")
    if token_file is not None:
        if token is not None:
            raise UsageError("give the token once: --token-file or --token / HETFLOW_UI_TOKEN, not both")
        token = _read_token(token_file)
    elif token is not None and getattr(ctx.get_parameter_source("token"), "name", "") == "COMMANDLINE":
        # argv is world-readable (/proc/PID/cmdline, ps): any local user could read the token.
        # (By name: typer carries its own copy of click, whose ParameterSource is another enum.)
        err.print(
            "hetflow ui: warning: --token on the command line is visible to every local user (ps); "
            "use HETFLOW_UI_TOKEN or --token-file",
            highlight=False,
        )
    config = UiConfig(
        store_path=hetflow_home() / "state.db",
        host=host,
        port=port,
        token=token,
        actions=actions,
        show_env=show_env,
        root=root,
        max_streams_per_client=streams_per_client,
        max_wrong_tokens=wrong_tokens,
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
    if config.token and token is None and token_file is None:
        err.print("(the token was made for this session; HETFLOW_UI_TOKEN or --token-file sets one)", highlight=False)
    serve(config, sock=sock)
