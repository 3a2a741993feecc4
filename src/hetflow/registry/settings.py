"""The proxy's settings: a YAML file, overridden by command-line values.

    upstream: http://127.0.0.1:5000     # the registry behind the proxy (required)
    listen: 127.0.0.1:5080              # HOST:PORT the proxy binds
    state_dir: /var/lib/hetflow/registry  # machine types, tokens, verified cache
    bearer_ttl_s: 300                   # lifetime of a bearer from /token
    admin_token: s3cret-at-least-16-chars  # registering a machine type needs it (made and
                                        # printed when none is set and the proxy listens
                                        # beyond loopback or holds upstream credentials)
    upstream_username: robot            # credentials for the upstream, if it wants any
    upstream_password: ...
    upstream_token_hosts: [auth.docker.io]  # token services besides the upstream's own host
                                        # that may get those credentials (none by default)
    machine_types:                      # predeclared machine types
      - profile: a100-node              # a built-in profile; the name defaults to it
      - name: lab-box
        node_file: nodes/lab.json       # `hetflow nodes --json` output (first node)
        token: hft_...                  # optional fixed token (else one is made)
        repositories: [lab/*]           # its tokens pull only these (fnmatch); default all
    limits:                             # every limit, with its default (see Limits)
      max_body_bytes: 65536
      max_blob_bytes: 10737418240

Limits bound what one client (or a misbehaving upstream) can take from the proxy:
memory, disk, connections and worker time; each has a documented default.

Relative ``node_file`` and ``state_dir`` paths are read against the config file's
folder.  A malformed file is a ``UsageError`` that names the file and the field.
"""

from __future__ import annotations

import ipaddress
import json
import re
import secrets
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hetflow.config import hetflow_home
from hetflow.errors import UsageError
from hetflow.inventory import PROFILES, Node, node_fields, profile_names, profile_node

__all__ = [
    "DEFAULT_LISTEN",
    "MIN_ADMIN_TOKEN",
    "Limits",
    "MachineTypeDecl",
    "Settings",
    "is_loopback",
    "load_settings",
    "parse_listen",
    "secured",
]

DEFAULT_LISTEN = "127.0.0.1:5080"
# Machine-type names are the user name of `podman login`, so no colon; kept to the
# characters of an OCI repository path component so they read well in logs and URLs.
NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}\Z")
MIN_ADMIN_TOKEN = 16  # as hetflow.ui.auth's MIN_TOKEN: long enough to resist guessing
MIB = 1024 * 1024


def is_loopback(host: str) -> bool:
    """True for localhost and 127.0.0.0/8, ::1 (as the dashboard's check, hetflow.ui.auth)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class Limits(BaseModel):
    """What one client, or the upstream, may take from the proxy.  Defaults are sized for a
    lab proxy in front of a few hundred nodes; raise them in the settings file's ``limits:``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_body_bytes: int = Field(default=64 * 1024, ge=1024, description="request body (/token, registrations)")
    # Enforced by the HTTP front (hetflow.front: HAProxy), before a request reaches the app.
    max_requests_per_client: int = Field(default=64, ge=1, description="requests one client address has open (429)")
    max_connections_per_client: int = Field(
        default=128, ge=1, description="connections one address holds, those still sending headers too (closed)"
    )
    max_connections: int = Field(default=1024, ge=1, description="requests at the app at once (then 2 s queue, 503)")
    request_timeout_s: float = Field(default=10.0, gt=0, description="a request's headers and body arrive by then")
    client_idle_timeout_s: float = Field(default=30.0, gt=0, description="a client silent or not reading: cut")
    keepalive_timeout_s: float = Field(default=5.0, gt=0, description="an idle keep-alive connection: closed")
    # 256 kinds of hardware is more than a lab has; with 1000 tokens each and 64 KiB
    # bodies it bounds the state file (rewritten on each registration) to tens of MB.
    max_machine_types: int = Field(default=256, ge=1, description="machine types, registered and declared")
    max_tokens_per_type: int = Field(default=1000, ge=1, description="tokens (registrations) per machine type")
    # Who registers without the admin token (a local user on an open loopback proxy, by UID):
    # so that one user cannot take a type's max_tokens_per_type (issue 38).
    max_tokens_per_holder: int = Field(default=100, ge=1, description="tokens one registrant holds, all types")
    max_manifest_bytes: int = Field(default=4 * MIB, ge=1024, description="one manifest or index (distribution's)")
    manifest_cache_bytes: int = Field(default=64 * MIB, ge=0, description="verified manifests kept in memory")
    view_cache_bytes: int = Field(
        default=16 * MIB, ge=0, description="each machine type's view of each index, or why nothing fits, in memory"
    )
    max_blob_bytes: int = Field(default=10 * 1024 * MIB, ge=1, description="one blob from the upstream")
    cache_quota_bytes: int = Field(default=50 * 1024 * MIB, ge=1, description="blob cache on disk (LRU eviction)")
    upstream_idle_timeout_s: float = Field(default=60.0, gt=0, description="upstream silent this long: given up")
    # A fill (one upstream blob into the cache) ends by its deadline, and earlier when it runs
    # slower than the minimum rate over the window; one nobody waits for any more is cancelled
    # as soon as it is slower than that (issue 38: fills of one byte every 20 s held the
    # proxy's threads for up to an hour, every cached blob waiting behind them).
    upstream_total_timeout_s: float = Field(
        default=1800.0, gt=0, le=86400, description="one blob fill: the wait for a slot and every attempt (503)"
    )
    upstream_min_rate_bytes_per_s: float = Field(
        default=32 * 1024, ge=0, description="a fill slower than this over the window gives up (503); 0: no minimum"
    )
    upstream_rate_window_s: float = Field(default=60.0, ge=1, le=3600, description="what the minimum rate is judged on")
    max_fills: int = Field(default=64, ge=1, le=4096, description="fills of distinct blobs at once; more wait for one")


def check_name(name: str) -> str:
    if not NAME_RE.match(name):
        raise ValueError(
            f"machine-type name {name!r} must be 1-64 characters of a-z, 0-9, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class MachineTypeDecl(BaseModel):
    """One predeclared machine type: a built-in profile, an inline Node, or a node file."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = None
    profile: str | None = None
    node: Node | None = None
    node_file: Path | None = None
    token: str | None = Field(default=None, min_length=16)
    # fnmatch patterns ("lab/*") of the repositories this type's tokens may pull; () = all
    repositories: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _one_source(self) -> MachineTypeDecl:
        given = [k for k in ("profile", "node", "node_file") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of profile, node or node_file")
        if self.profile is not None and self.profile not in PROFILES:
            raise ValueError(f"unknown profile {self.profile!r}; known: {', '.join(profile_names())}")
        if self.name is None and self.profile is None:
            raise ValueError("a machine type from node or node_file needs a name")
        check_name(self.type_name)
        return self

    @property
    def type_name(self) -> str:
        return self.name or self.profile or ""

    def resolve_node(self, base: Path) -> Node:
        """The Node this declaration stands for, named after the machine type."""
        if self.profile is not None:
            node = profile_node(self.profile)
        elif self.node is not None:
            node = self.node
        else:
            assert self.node_file is not None
            node = read_node_file(self.node_file if self.node_file.is_absolute() else base / self.node_file)
        return node.model_copy(update={"name": self.type_name})


def read_node_file(path: Path) -> Node:
    """A Node from a JSON file: one Node, or the list `hetflow nodes --json` prints."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(data, list):
            if not data:
                raise UsageError(f"{path}: the node list is empty")
            data = data[0]
        return Node.model_validate(node_fields(data))
    except OSError as err:
        raise UsageError(f"cannot read node file {path}: {err.strerror}") from err
    except (json.JSONDecodeError, ValidationError) as err:
        raise UsageError(f"{path} is not the JSON of `hetflow nodes --json`: {err}") from err


def parse_listen(listen: str) -> tuple[str, int]:
    """``"127.0.0.1:5080"`` -> ``("127.0.0.1", 5080)``; ``"[::1]:5080"`` works too."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise UsageError(f"--listen {listen!r}: write HOST:PORT, e.g. {DEFAULT_LISTEN}")
    return host.strip("[]") or "127.0.0.1", int(port)


class Settings(BaseModel):
    """Everything ``create_app`` needs; build one with ``load_settings`` or directly."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    upstream: str = Field(description="base URL of the upstream registry, e.g. http://127.0.0.1:5000")
    listen: str = DEFAULT_LISTEN
    state_dir: Path = Field(default_factory=lambda: hetflow_home() / "registry")
    bearer_ttl_s: int = Field(default=300, ge=10, le=86400)
    admin_token: str | None = Field(default=None, min_length=MIN_ADMIN_TOKEN)
    upstream_username: str | None = None
    upstream_password: str | None = None
    machine_types: tuple[MachineTypeDecl, ...] = ()
    service: str = "hetflow"
    # Bodies up to this size are hashed in full before the first byte goes out, so a
    # mismatch is a clean 502; larger ones stream and the connection is cut instead.
    # 256 KiB (four 64 KiB cached-blob reads): about what a stalled reader can pin
    # (issue 23: at 8 MiB, 150 idle clients of a 7.5 MiB blob took 1 GB).
    verify_buffer_bytes: int = Field(default=256 * 1024, ge=0)
    limits: Limits = Field(default_factory=Limits)
    # Hosts (besides the upstream's own) a manifest or tag-list request may be redirected to.
    redirect_hosts: tuple[str, ...] = ()
    # Hosts (besides the upstream's own) whose token service may get upstream_username and
    # upstream_password: a challenge naming any other realm is refused (issue 38).
    upstream_token_hosts: tuple[str, ...] = ()
    config_dir: Path = Field(default=Path("."), description="where relative node_file paths start")

    @field_validator("upstream")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"upstream {value!r} must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @property
    def needs_admin_token(self) -> bool:
        """Anyone beyond this machine could register (and so pull, through the proxy's
        upstream credentials) unless registering needs the admin token."""
        return not is_loopback(parse_listen(self.listen)[0]) or self.upstream_username is not None

    @model_validator(mode="after")
    def _unique(self) -> Settings:
        names = [d.type_name for d in self.machine_types]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"machine type(s) declared twice: {', '.join(dupes)}")
        return self


def secured(settings: Settings) -> tuple[Settings, str | None]:
    """``settings`` with an admin token wherever one is needed (made now, and returned
    second so the caller prints it, as ``hetflow ui`` does with its token)."""
    if settings.admin_token is not None or not settings.needs_admin_token:
        return settings, None
    token = secrets.token_urlsafe(24)
    return settings.model_copy(update={"admin_token": token}), token


def load_settings(
    config: Path | None = None,
    *,
    upstream: str | None = None,
    listen: str | None = None,
    state_dir: Path | None = None,
) -> Settings:
    """Settings from ``config`` (YAML), with the given command-line values on top."""
    data: dict[str, Any] = {}
    if config is not None:
        try:
            loaded = yaml.safe_load(config.read_text(encoding="utf-8"))
        except OSError as err:
            raise UsageError(f"cannot read registry config {config}: {err.strerror}") from err
        except yaml.YAMLError as err:
            raise UsageError(f"{config} is not valid YAML: {err}") from err
        if loaded is not None and not isinstance(loaded, dict):
            raise UsageError(f"{config}: expected a mapping of settings at the top level")
        data = dict(loaded or {})
        base = config.parent.resolve()
        data["config_dir"] = base
        if data.get("state_dir") is not None and not Path(str(data["state_dir"])).is_absolute():
            data["state_dir"] = base / str(data["state_dir"])
    for key, value in (("upstream", upstream), ("listen", listen), ("state_dir", state_dir)):
        if value is not None:
            data[key] = value
    if not data.get("upstream"):
        raise UsageError("no upstream registry: pass --upstream URL or set `upstream:` in the config file")
    try:
        return Settings.model_validate(data)
    except ValidationError as err:
        where = f"{config}: " if config is not None else ""
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in err.errors())
        raise UsageError(f"{where}{problems}") from err
