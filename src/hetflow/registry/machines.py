"""Machine types and their tokens, kept in the proxy's state directory.

A machine type is a named ``Node``: the hardware every machine that logs in with
one of its tokens is taken to have.  ``hetflow registry login`` registers a node's
hardware; nodes whose hardware is alike for image selection (same CPU
microarchitecture, level and flags; same GPU vendors, models, capabilities or gfx
targets, driver, CUDA and ROCm versions, and fake flag) share one type, as Nomad
checks nodes of one computed class once.

Tokens are kept as SHA-256 hashes; a token is shown once, when it is made (tokens of
predeclared types are also written to ``tokens/<type>``, mode 0600, for the admin).  Each
token names its holder, who registered it: ``admin`` (with the admin token), ``config`` (a
declared type's), or on an open proxy the local user (``uid:N``, ``hetflow.registry.server.peers``)
or else the address; one such holder may have ``max_tokens_per_holder`` tokens over all types,
so one local user cannot use up a type's tokens (issue 38).  Tokens are revoked one by one
(by the token or its id), by holder, or all of a type.
``machine-types.json`` is replaced atomically, so a crash leaves the old or the new file.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hetflow.inventory import Node
from hetflow.registry.settings import MachineTypeDecl, check_name

__all__ = [
    "MachineType",
    "MachineTypeConflict",
    "MachineTypeLimit",
    "MachineTypes",
    "TokenInfo",
    "hardware_key",
    "suggest_name",
]

STATE_FILE = "machine-types.json"


class MachineType(BaseModel):
    """A machine type as the proxy knows it (no secrets)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    node: Node
    origin: str = Field(description="config (predeclared) or registered (hetflow registry login)")
    hardware: str = Field(description="sha256 of the hardware facts image selection looks at")


class _TokenRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    sha256: str
    # fnmatch patterns of the repositories the token may pull; () = every repository
    repositories: tuple[str, ...] = ()
    holder: str = ""  # who registered it ("" in a state file older than holders)


class TokenInfo(BaseModel):
    """A token as ``hetflow registry token list`` shows it: never the token itself."""

    model_config = ConfigDict(frozen=True)

    machine_type: str
    id: str
    holder: str
    repositories: tuple[str, ...]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: MachineType
    tokens: list[_TokenRecord] = []


class MachineTypeConflict(Exception):
    """A name is taken by a machine type with different hardware."""


class MachineTypeLimit(Exception):
    """limits.max_machine_types, max_tokens_per_type or max_tokens_per_holder reached."""


# Holders the per-holder limit counts: those who registered without the admin token.
_COUNTED = ("uid:", "address:")


def hardware_key(node: Node) -> str:
    """sha256 of what tells builds apart: CPU family, microarchitecture, psABI level and
    flags; per GPU what ``hetflow.images.matching.match`` and ``nodecheck`` read: its vendor,
    model, compute capability, architecture (AMD gfx target, Intel family), memory,
    driver, CUDA and ROCm versions and the fake flag.  Names, host names, core and
    memory counts, device paths and UUIDs are left out: two nodes that differ only
    there run the same builds.  (Issue 23: without vendor, gfx target and ROCm a
    gfx942/ROCm 5.7 node joined a gfx90a/ROCm 6.1 type and got the gfx90a build.)"""
    cpu = node.cpu
    facts = {
        "os": node.os,
        "cpu": [cpu.vendor, cpu.architecture, cpu.microarchitecture, cpu.x86_64_level, sorted(cpu.features)],
        "gpus": sorted(
            [
                g.vendor,
                g.model,
                g.compute_capability,
                g.architecture,
                g.memory_bytes,
                g.driver_version,
                g.cuda_version or "",
                g.rocm_version or "",
                g.fake,
            ]
            for g in node.gpus
        ),
    }
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()


def suggest_name(node: Node) -> str:
    """A readable, stable name for a registered type, e.g. ``x86_64-icelake-4xa100-1f2e3d4c``."""
    parts = [node.cpu.architecture, node.cpu.microarchitecture]
    if node.gpus:
        models: dict[str, int] = {}
        for gpu in node.gpus:
            words = re.split(r"[\s-]+", re.sub(r"^(nvidia|tesla)\s+", "", gpu.model.lower()).strip())
            short = words[0] or "gpu"
            models[short] = models.get(short, 0) + 1
        parts += [f"{n}x{m}" for m, n in sorted(models.items())]
    base = re.sub(r"[^a-z0-9._-]+", "-", "-".join(parts).lower()).strip("-._")[:50] or "node"
    return f"{base}-{hardware_key(node)[:8]}"


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return "hft_" + secrets.token_urlsafe(32)


def _write_private(path: Path, text: str) -> None:
    """Atomically, 0600; a failed write (a full disk) leaves the old file and no temporary."""
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class MachineTypes:
    """The machine types of one state directory.  Thread-safe; every change is saved."""

    def __init__(
        self, state_dir: Path, *, max_types: int = 1000, max_tokens: int = 1000, max_per_holder: int = 100
    ) -> None:
        self._dir = state_dir
        self.max_types = max_types
        self.max_tokens = max_tokens
        self.max_per_holder = max_per_holder
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._seen: int | None = None  # the state file's mtime_ns when last read or written
        self._load()
        for stale in self._dir.glob(f"{STATE_FILE}.tmp*"):  # a crash mid-save
            stale.unlink(missing_ok=True)

    @property
    def state_file(self) -> Path:
        return self._dir / STATE_FILE

    def _mtime(self) -> int | None:
        try:
            return (self._dir / STATE_FILE).stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def _refresh(self) -> None:
        """Read the state file again if another process (``hetflow registry token revoke``)
        changed it since: one stat per authentication."""
        if self._mtime() != self._seen:
            with self._lock:
                self._load()

    def _load(self) -> None:
        path = self._dir / STATE_FILE
        self._seen = self._mtime()
        self._records = {}
        if path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            for name, raw in data.get("types", {}).items():
                record = _Record.model_validate(raw)
                # The key may have learnt new facts since it was saved: recomputed, so a
                # node joins only a type whose hardware is its own by today's key.
                record.type = record.type.model_copy(update={"hardware": hardware_key(record.type.node)})
                self._records[name] = record

    def _save(self) -> None:
        data = {"types": {n: r.model_dump(mode="json") for n, r in sorted(self._records.items())}}
        _write_private(self._dir / STATE_FILE, json.dumps(data, indent=2, sort_keys=True) + "\n")
        self._seen = self._mtime()

    def get(self, name: str) -> MachineType | None:
        record = self._records.get(name)
        return record.type if record else None

    def all(self) -> list[MachineType]:
        return [r.type for _, r in sorted(self._records.items())]

    def authenticate(self, name: str, token: str) -> str | None:
        """The token id when ``token`` is one of ``name``'s tokens; else None."""
        self._refresh()
        record = self._records.get(name)
        if record is None:
            return None
        digest = _token_hash(token)
        for t in record.tokens:
            if hmac.compare_digest(t.sha256, digest):
                return t.id
        return None

    def has_token_id(self, name: str, token_id: str) -> bool:
        return self.token_scope(name, token_id) is not None

    def token_scope(self, name: str, token_id: str) -> tuple[str, ...] | None:
        """The repository patterns of ``name``'s token ``token_id`` (``()``: all); None
        when there is no such token (never issued, or revoked)."""
        self._refresh()
        record = self._records.get(name)
        found = next((t for t in record.tokens if t.id == token_id), None) if record else None
        return None if found is None else found.repositories

    def _add_token(self, record: _Record, token: str, repositories: Iterable[str] = (), holder: str = "") -> None:
        digest = _token_hash(token)
        record.tokens[:] = [t for t in record.tokens if t.sha256 != digest]  # a config's token: its scope now
        record.tokens.append(
            _TokenRecord(id=digest[:16], sha256=digest, repositories=tuple(repositories), holder=holder)
        )

    def tokens(self) -> list[TokenInfo]:
        """Every token (its id, type, holder and scope), as saved now."""
        with self._lock:
            self._load()
            return [
                TokenInfo(machine_type=name, id=t.id, holder=t.holder, repositories=t.repositories)
                for name, record in sorted(self._records.items())
                for t in record.tokens
            ]

    def revoke(
        self,
        *,
        token: str | None = None,
        token_id: str | None = None,
        holder: str | None = None,
        machine_type: str | None = None,
    ) -> list[TokenInfo]:
        """Revoke the token ``token`` (the secret), the token whose id is ``token_id``, every
        token of ``holder`` or of ``machine_type`` (give one); the revoked ones (empty when
        none matched).  A running proxy refuses them, and their bearers, from its next
        authentication (it re-reads the file)."""
        digest = _token_hash(token) if token is not None else None

        def chosen(name: str, t: _TokenRecord) -> bool:
            if digest is not None:
                return hmac.compare_digest(t.sha256, digest)
            if token_id is not None:
                return t.id == token_id
            return t.holder == holder if holder is not None else name == machine_type

        with self._lock:
            self._load()
            gone = [
                TokenInfo(machine_type=name, id=t.id, holder=t.holder, repositories=t.repositories)
                for name, record in sorted(self._records.items())
                for t in record.tokens
                if chosen(name, t)
            ]
            if gone:
                for name, record in self._records.items():
                    record.tokens[:] = [t for t in record.tokens if not chosen(name, t)]
                self._save()
            return gone

    def issue_token(self, name: str) -> str:
        """A new token for ``name`` (its other tokens stay valid)."""
        with self._lock:
            token = new_token()
            self._add_token(self._records[name], token)
            self._save()
            return token

    def revoke_tokens(self, name: str) -> int:
        """Revoke every token of ``name`` (and so its bearers); how many there were.
        A running proxy notices at its next authentication (it re-reads the file)."""
        with self._lock:
            self._load()
            if name not in self._records:
                known = ", ".join(sorted(self._records)) or "none"
                raise KeyError(f"no machine type {name!r} in {self._dir / STATE_FILE}; known: {known}")
            count = len(self._records[name].tokens)
            self._records[name].tokens.clear()
            self._save()
            return count

    def declare(self, decls: Iterable[MachineTypeDecl], config_dir: Path) -> dict[str, str]:
        """Put the config's machine types in place (the config wins over the saved node).

        Returns the tokens made now, by type, for types that had none; they are also
        written to ``tokens/<type>`` (0600) so an admin can hand them out."""
        made: dict[str, str] = {}
        with self._lock:
            for decl in decls:
                node = decl.resolve_node(config_dir)
                mt = MachineType(name=decl.type_name, node=node, origin="config", hardware=hardware_key(node))
                record = self._records.get(mt.name)
                if record is None:
                    record = self._records[mt.name] = _Record(type=mt)
                else:
                    record.type = mt
                if decl.token:
                    self._add_token(record, decl.token, decl.repositories, "config")
                if not record.tokens:
                    token = new_token()
                    self._add_token(record, token, decl.repositories, "config")
                    made[mt.name] = token
                    (self._dir / "tokens").mkdir(mode=0o700, exist_ok=True)
                    _write_private(self._dir / "tokens" / mt.name, token + "\n")
            self._save()
        return made

    def register(
        self, node: Node, name: str | None = None, repositories: Iterable[str] = (), holder: str = "admin"
    ) -> tuple[MachineType, str, bool]:
        """Register a node's hardware for ``holder``: ``(type, new token, created)``.

        A node whose hardware matches a known type joins it (a fresh token is issued
        for it); otherwise a type is made, named ``name`` or ``suggest_name(node)``.
        Raises ``MachineTypeConflict`` when ``name`` is taken by other hardware and
        ``MachineTypeLimit`` past a limit."""
        key = hardware_key(node)
        with self._lock:
            if name is not None:
                check_name(name)
                found = self._records.get(name)
                if found is not None and found.type.hardware != key:
                    raise MachineTypeConflict(
                        f"machine type {name!r} exists with other hardware; pick another name or leave it out"
                    )
            else:
                found = next((r for r in self._records.values() if r.type.hardware == key), None)
            created = found is None
            self._check_limits(found, holder)
            if found is None:
                type_name = name or suggest_name(node)
                mt = MachineType(
                    name=type_name,
                    node=node.model_copy(update={"name": type_name}),
                    origin="registered",
                    hardware=key,
                )
                found = self._records[type_name] = _Record(type=mt)
            token = new_token()
            self._add_token(found, token, repositories, holder)
            try:
                self._save()
            except OSError:  # a full disk: nothing half-made stays in memory either
                found.tokens.pop()
                if created:
                    del self._records[found.type.name]
                raise
            return found.type, token, created

    def _check_limits(self, found: _Record | None, holder: str) -> None:
        """``MachineTypeLimit`` when one more token (and type, if ``found`` is None) would pass
        a limit.  The holder's limit comes first: it is the one a single local user meets."""
        if holder.startswith(_COUNTED):
            held = sum(t.holder == holder for r in self._records.values() for t in r.tokens)
            if held >= self.max_per_holder:
                who = f"uid {holder[4:]}" if holder.startswith("uid:") else holder.replace(":", " ", 1)
                raise MachineTypeLimit(
                    f"{who} holds {held} tokens, the most one registrant may (limits.max_tokens_per_holder); "
                    f"revoke unused ones (`hetflow registry token revoke --holder {holder}`; `token list` shows "
                    "them) or register with the admin token"
                )
        if found is None and len(self._records) >= self.max_types:
            raise MachineTypeLimit(
                f"the proxy holds {len(self._records)} machine types, its limit (limits.max_machine_types); "
                "remove unused ones from the state directory or raise the limit"
            )
        if found is not None and len(found.tokens) >= self.max_tokens:
            raise MachineTypeLimit(
                f"machine type {found.type.name!r} has {len(found.tokens)} tokens, its limit "
                "(limits.max_tokens_per_type); revoke them (`hetflow registry token revoke`) or raise the limit"
            )

    def describe(self) -> list[dict[str, Any]]:
        """Public listing: names, origins and nodes, never tokens."""
        return [t.model_dump(mode="json") for t in self.all()]
