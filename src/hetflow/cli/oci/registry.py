"""``hetflow registry serve`` and ``hetflow registry login``: the typer commands, and what
they do (``serve_command``, ``login_command``), which tests call directly.  The proxy
itself is ``hetflow.registry``, imported only when ``serve`` runs (it loads starlette
and uvicorn, which no other command needs).

``login_command`` runs on a node: it posts the node's hardware (its ``Node`` JSON) to
the proxy, which answers with the machine type it belongs to and a token for it, then
logs the container engine in with that pair, the password on stdin (never on a
command line, where ``ps`` shows it):

    podman login [--tls-verify=false] [--authfile F] -u <machine type> --password-stdin HOST:PORT
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import httpx
import typer

from hetflow.cli.common import err, print_json
from hetflow.cli.oci.images import load_node
from hetflow.config import engine_env
from hetflow.errors import EngineError, UsageError
from hetflow.images import AuthError, RegistryError
from hetflow.inventory import Node

if TYPE_CHECKING:
    from hetflow.registry import MachineTypes

__all__ = [
    "LoginResult",
    "login_command",
    "register",
    "register_node",
    "serve_command",
    "token_revoke_command",
]

registry_app = typer.Typer(help="A registry proxy that serves each machine type its own index.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(registry_app, name="registry")


@registry_app.command("serve")
def serve_cmd(
    upstream: str | None = typer.Option(
        None, "--upstream", help="The registry behind the proxy, e.g. http://127.0.0.1:5000"
    ),
    listen: str | None = typer.Option(
        None, "--listen", help="ADDR:PORT (default 127.0.0.1:5080); beyond loopback, registering needs the admin token."
    ),
    config: Path | None = typer.Option(None, "--config", help="YAML: upstream, listen, state dir, machine types."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="Tokens and machine types (persist)."),
) -> None:
    """Serve the OCI Distribution API in front of a registry, one filtered index per machine type."""
    serve_command(upstream, listen, config, state_dir)


token_app = typer.Typer(help="The machine types' tokens.", no_args_is_help=True)
registry_app.add_typer(token_app, name="token")


@token_app.command("revoke")
def token_revoke_cmd(
    target: str | None = typer.Argument(
        None, help="A token (it alone stops working), or a machine type (all of its tokens do)."
    ),
    token_id: str | None = typer.Option(None, "--id", help="The token with this id (`hetflow registry token list`)."),
    holder: str | None = typer.Option(None, "--holder", help="Every token this holder registered (uid:N, admin...)."),
    config: Path | None = typer.Option(None, "--config", help="The proxy's YAML (for its state_dir)."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="The proxy's state directory."),
    json_out: bool = typer.Option(False, "--json", help="{revoked: [{machine_type, id, holder, repositories}]}"),
) -> None:
    """Revoke tokens (and their bearers); a running proxy refuses them from its next request."""
    revoked = token_revoke_command(target, config, state_dir, token_id=token_id, holder=holder)
    if json_out:
        print_json({"revoked": revoked})
        return
    for t in revoked:
        err.print(
            f"revoked token {t['id']} of machine type {t['machine_type']} (holder {t['holder']})", highlight=False
        )


@token_app.command("list")
def token_list_cmd(
    config: Path | None = typer.Option(None, "--config", help="The proxy's YAML (for its state_dir)."),
    state_dir: Path | None = typer.Option(None, "--state-dir", help="The proxy's state directory."),
    json_out: bool = typer.Option(False, "--json", help="[{machine_type, id, holder, repositories}]"),
) -> None:
    """Every token's id, machine type, holder (who registered it) and scope; never the token."""
    tokens = [t.model_dump(mode="json") for t in _machine_types(config, state_dir).tokens()]
    if json_out:
        print_json(tokens)
        return
    for t in tokens:
        scope = ",".join(t["repositories"]) or "all"
        print(f"{t['id']}  {t['machine_type']}  holder {t['holder'] or '?'}  repositories {scope}")


def _machine_types(config: Path | None, state_dir: Path | None) -> MachineTypes:
    from hetflow.registry import MachineTypes, Settings, load_settings

    if config is not None:
        state = load_settings(config, state_dir=state_dir, upstream="http://unused").state_dir
    else:
        state = state_dir or Settings(upstream="http://unused").state_dir
    if not (state / "machine-types.json").exists():
        raise UsageError(f"{state} holds no machine types (machine-types.json); give the proxy's --state-dir")
    return MachineTypes(state)


def token_revoke_command(
    target: str | None,
    config: Path | None,
    state_dir: Path | None,
    *,
    token_id: str | None = None,
    holder: str | None = None,
) -> list[dict[str, Any]]:
    """Revoke one token (``target`` a token, or ``token_id``), a holder's, or a machine type's
    (``target`` its name): the revoked tokens, never the secret.  Nothing matched: UsageError."""
    if sum(x is not None for x in (target, token_id, holder)) != 1:
        raise UsageError("give one of: a TOKEN or MACHINE_TYPE, --id ID, --holder HOLDER")
    types = _machine_types(config, state_dir)
    if token_id is not None:
        gone, what = types.revoke(token_id=token_id), f"with id {token_id!r}"
    elif holder is not None:
        gone, what = types.revoke(holder=holder), f"of holder {holder!r}"
    else:
        assert target is not None
        # A token first (a type name is never a token hetflow makes), then a machine type.
        gone, what = types.revoke(token=target), "or machine type matches the one given"
        if not gone and types.get(target) is not None:
            gone = types.revoke(machine_type=target)
            if not gone:
                raise UsageError(f"machine type {target!r} has no tokens left to revoke")
    if not gone:
        raise UsageError(
            f"no token {what} in {types.state_file}; it may be revoked already "
            "(`hetflow registry token list` shows the tokens)"
        )
    return [t.model_dump(mode="json") for t in gone]


@registry_app.command("login")
def login_cmd(
    proxy: str = typer.Argument(..., help="The proxy's URL, e.g. http://127.0.0.1:5080"),
    node: str | None = typer.Option(None, "--node", help="Register this description instead of this machine."),
    name: str | None = typer.Option(None, "--name", help="Machine type name (default: from the hardware)."),
    admin_token: str | None = typer.Option(None, "--admin-token", envvar="HETFLOW_REGISTRY_ADMIN_TOKEN"),
    authfile: Path | None = typer.Option(None, "--authfile", help="podman's auth file to write."),
) -> None:
    """Register this node's hardware with the proxy and log podman (or docker) in with its token."""
    from hetflow.config import find_engine

    result = login_command(proxy, load_node(node), find_engine(), name=name, admin_token=admin_token, authfile=authfile)
    err.print(f"logged in to {proxy} as machine type {result.machine_type}", highlight=False)


def serve_command(upstream: str | None, listen: str | None, config: Path | None, state_dir: Path | None = None) -> None:
    """``hetflow registry serve --upstream URL [--listen ADDR] [--config FILE]``."""
    from hetflow.registry import load_settings, secured, serve

    settings, made = secured(load_settings(config, upstream=upstream, listen=listen, state_dir=state_dir))
    print(
        f"hetflow registry proxy for {settings.upstream} on http://{settings.listen} (state in {settings.state_dir})",
        file=sys.stderr,
    )
    if made is not None:
        # As `hetflow ui` does: reachable beyond this machine (or lending upstream
        # credentials) means nobody registers hardware without this token.
        print(
            f"admin token (registering machine types needs it): {made}\n"
            "  nodes log in with: HETFLOW_REGISTRY_ADMIN_TOKEN=<token> hetflow registry login URL\n"
            "  (made for this session; set admin_token: in --config to keep one)",
            file=sys.stderr,
        )
    serve(settings)


@dataclass(frozen=True)
class LoginResult:
    machine_type: str
    registry: str  # HOST:PORT, as image references through the proxy start
    created: bool  # a new machine type (else the node joined an existing one)
    token: str = field(repr=False)


def _registry_host(proxy_url: str) -> tuple[str, bool]:
    parts = urlsplit(proxy_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"proxy URL {proxy_url!r}: write http://HOST:PORT (or https://)")
    return parts.netloc, parts.scheme == "http"


def register_node(
    proxy_url: str,
    node: Node,
    *,
    name: str | None = None,
    admin_token: str | None = None,
    transport: httpx.BaseTransport | None = None,
) -> LoginResult:
    """POST ``node`` to the proxy: its machine type and a fresh token for it."""
    host, _ = _registry_host(proxy_url)
    headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
    url = proxy_url.rstrip("/") + "/hetflow/v1/machine-types"
    try:
        with httpx.Client(transport=transport, timeout=30) as client:
            response = client.post(
                url, params={"name": name} if name else None, headers=headers, content=node.model_dump_json()
            )
    except httpx.HTTPError as err:
        raise RegistryError(f"cannot reach the registry proxy at {proxy_url}: {err!r}", url=url) from err
    if response.status_code in (200, 201):
        data = response.json()
        return LoginResult(str(data["machine_type"]), host, bool(data["created"]), str(data["token"]))
    try:
        message = response.json()["errors"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        message = response.text[:200]
    cls = AuthError if response.status_code == 401 else RegistryError
    raise cls(f"the proxy refused to register {node.name}: {message}", status=response.status_code, url=url)


def login_command(
    proxy_url: str,
    node: Node,
    engine_binary: str,
    *,
    name: str | None = None,
    admin_token: str | None = None,
    authfile: Path | None = None,
    env: Mapping[str, str] | None = None,
    transport: httpx.BaseTransport | None = None,
) -> LoginResult:
    """``hetflow registry login PROXY_URL``: register this node's hardware and log the
    engine (podman or docker) in with its machine type's token."""
    result = register_node(proxy_url, node, name=name, admin_token=admin_token, transport=transport)
    _, insecure = _registry_host(proxy_url)
    argv = [engine_binary, "login"]
    if "docker" not in Path(engine_binary).name:
        # podman/skopeo: plain HTTP needs --tls-verify=false (docker allows it for
        # 127.0.0.0/8 and its configured insecure-registries only).
        if insecure:
            argv.append("--tls-verify=false")
        if authfile is not None:
            argv += ["--authfile", str(authfile)]
    elif authfile is not None:
        raise UsageError("docker keeps credentials in ~/.docker/config.json; --authfile is podman's")
    argv += ["-u", result.machine_type, "--password-stdin", result.registry]
    try:
        proc = subprocess.run(
            argv, input=result.token, capture_output=True, text=True, env=engine_env(env), timeout=60, check=False
        )
    except OSError as err:
        raise EngineError(f"cannot run {engine_binary}: {err.strerror}") from err
    if proc.returncode != 0:
        raise EngineError(
            f"`{' '.join(argv)}` failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[:500]}"
        )
    return result
