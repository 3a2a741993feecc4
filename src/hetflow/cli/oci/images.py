"""Image commands: inspect, resolve, build-index (the registry proxy's are in ``cli.oci.registry``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from hetflow.cli.common import console, print_json
from hetflow.config import hetflow_home
from hetflow.errors import UsageError
from hetflow.inventory import Node, discover, node_fields

if TYPE_CHECKING:
    from hetflow.images import ImageSource

images_app = typer.Typer(
    help="Hardware-matched images: which build of an image index fits a node.", no_args_is_help=True
)

TLS_OPT = typer.Option(
    None,
    "--tls-verify/--no-tls-verify",
    help="Verify TLS (default: plain HTTP for loopback registries, as podman allows).",
)
USER_OPT = typer.Option(None, "--username", help="Registry user.")
PASS_OPT = typer.Option(None, "--password", envvar="HETFLOW_REGISTRY_PASSWORD", help="Registry password or token.")


def register(app: typer.Typer) -> None:
    app.add_typer(images_app, name="images")


def _source(ref: str, tls_verify: bool | None, username: str | None, password: str | None) -> ImageSource:
    """The flags as one ``ImageSource``: TLS unless --tls-verify=false or a local or loopback
    reference, and the credentials."""
    from hetflow.images import ImageSource, parse_reference

    if tls_verify is not None:
        insecure = not tls_verify
    else:
        parsed = parse_reference(ref)
        insecure = parsed.local or parsed.is_loopback
    return ImageSource(insecure=insecure, username=username, password=password)


def load_node(spec: str | None) -> Node:
    """``--node``: a file of `hetflow nodes --json` output, a named hardware profile, or
    (default) this machine."""
    if spec is None:
        return discover(hetflow_home())
    path = Path(spec)
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"--node {spec}: not a JSON node description: {exc}") from None
        entries = data if isinstance(data, list) else [data]
        if len(entries) != 1:
            raise UsageError(f"--node {spec}: holds {len(entries)} nodes; give a file with one")
        try:
            return Node.model_validate(node_fields(entries[0]))
        except ValueError as exc:
            raise UsageError(f"--node {spec}: not a node description (hetflow nodes --json): {exc}") from None
    from hetflow.inventory import profile_names, profile_node

    if spec in profile_names():
        return profile_node(spec)
    raise UsageError(f"--node {spec!r}: no such file and no such profile; profiles: {', '.join(profile_names())}")


@images_app.command("inspect")
def inspect_cmd(
    image: str = typer.Argument(..., help="REGISTRY/REPO:TAG, or a local podman name (localhost/...)."),
    json_out: bool = typer.Option(False, "--json"),
    tls_verify: bool | None = TLS_OPT,
    username: str | None = USER_OPT,
    password: str | None = PASS_OPT,
) -> None:
    """List an image index's builds and what each needs."""
    from hetflow.images import inspect_image

    result = inspect_image(image, _source(image, tls_verify, username, password))
    if json_out:
        print_json(result.to_json())
    else:
        console.print(result.render())


@images_app.command("resolve")
def resolve_cmd(
    image: str = typer.Argument(..., help="REGISTRY/REPO:TAG, or a local podman name."),
    node: str | None = typer.Option(None, "--node", help="A `hetflow nodes --json` file or a profile name."),
    here: bool = typer.Option(False, "--here", help="This machine (the default)."),
    json_out: bool = typer.Option(False, "--json"),
    tls_verify: bool | None = TLS_OPT,
    username: str | None = USER_OPT,
    password: str | None = PASS_OPT,
) -> None:
    """The build of an image that a node should run (by digest), and why every other lost."""
    from hetflow.images import resolve_image

    if here and node is not None:
        raise UsageError("give --node or --here, not both")
    result = resolve_image(image, load_node(node), _source(image, tls_verify, username, password))
    if json_out:
        print_json(result.to_json())
    else:
        console.print(result.render())
    if result.chosen is None:
        raise typer.Exit(1)


@images_app.command("build-index")
def build_index_cmd(
    target: str = typer.Argument(..., help="REGISTRY/REPO:TAG to push the index as."),
    builds: list[str] = typer.Argument(
        ..., metavar="TAG=FEATURES...", help="One per build, e.g. generic v3=x86-64-v3 gpu=gpu:sm_80"
    ),
    json_out: bool = typer.Option(False, "--json"),
    tls_verify: bool | None = TLS_OPT,
    username: str | None = USER_OPT,
    password: str | None = PASS_OPT,
) -> None:
    """Assemble an index from per-build tags of the same repository, with their requirements."""
    from hetflow.images import build_index_image

    built = build_index_image(target, builds, _source(target, tls_verify, username, password))
    if json_out:
        print_json(
            {
                "reference": target,
                "digest": built.digest,
                "media_type": built.media_type,
                "manifests": [m.model_dump(by_alias=True, exclude_none=True) for m in built.index.manifests],
            }
        )
    else:
        console.print(f"{target} -> {built.digest} ({len(built.index.manifests)} builds)", highlight=False)
