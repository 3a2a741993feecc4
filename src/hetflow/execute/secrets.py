"""Step secrets: ``secrets: [NAME]`` on a step, valued from the environment of the process
that executes the run, or from a secrets file (``--secrets-file FILE``, or
``HETFLOW_SECRETS_FILE``), never from anything hetflow records.

    gather          the values a workflow's steps name, or UsageError naming each missing one
    activate        this process's values: the container spec, the cache key and masking read them
    mask            a text with every active value replaced by ***
    scrub_logs      an ended attempt's log files rewritten with every active value masked
    secret_digests  HMAC-SHA256 of each value under this home's salt: what the cache key holds

A value reaches the container as ``$NAME`` (through podman's ``--env-file``, removed once the
container exists) and as ``/run/secrets/NAME`` (``podman run --secret``, mode 0400, owned by the
step's user; podman copies it into its container storage when it creates the container and
removes it with the container: podman-run(1), "--secret").  What hetflow keeps is only the
names and the salted digests, so a changed value runs the step again and a store leaks no value.

The secrets file holds ``NAME=VALUE`` lines, as podman's and docker's ``--env-file`` do: the
value is everything after the first ``=`` (no quotes, no escapes); blank lines and lines
starting with ``#`` are skipped.  The file wins over the environment.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets as _random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from hetflow.errors import UsageError

if TYPE_CHECKING:
    from hetflow.spec import Workflow

SECRETS_FILE_ENV = "HETFLOW_SECRETS_FILE"
MASK = "***"
SALT_FILE = "secrets.salt"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_MAX_FILE = 1 << 20  # a secrets file is a few lines; a larger one is a wrong path


@dataclass(frozen=True)
class Secrets:
    """Values by name (never shown by ``repr``), and where they were looked for."""

    values: Mapping[str, str] = field(default_factory=dict, repr=False)
    file: str | None = None

    def of(self, names: Iterable[str]) -> dict[str, str]:
        return {n: self.values[n] for n in names if n in self.values}


_active = Secrets()


def activate(secrets: Secrets) -> None:
    """Make ``secrets`` this process's: the launcher gives them to containers, the runner
    keys the cache with their digests, and every log line read in this process is masked."""
    global _active
    _active = secrets


def active() -> Secrets:
    return _active


def read_secrets_file(path: Path) -> dict[str, str]:
    """``NAME=VALUE`` lines (see the module's docstring); a malformed line is refused with its
    line number, never with its text (it may hold a value)."""
    try:
        if path.stat().st_size > _MAX_FILE:
            raise UsageError(f"secrets file {path}: over {_MAX_FILE} bytes; it holds NAME=VALUE lines")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"secrets file {path}: no such file (--secrets-file or {SECRETS_FILE_ENV})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"secrets file {path}: cannot be read as UTF-8 text ({type(exc).__name__})") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, value = line.partition("=")
        if not sep or not _NAME.match(name):
            raise UsageError(
                f"secrets file {path}:{number}: expected NAME=VALUE (NAME: letters, digits and '_'); "
                "blank lines and '#' comments are allowed"
            )
        values[name] = value
    return values


def gather(workflow: Workflow, env: Mapping[str, str], *, resume: bool = False) -> Secrets:
    """The values of every secret ``workflow``'s steps name: from the secrets file
    (``HETFLOW_SECRETS_FILE`` in ``env``) first, then ``env``.  Every missing one is refused
    at once, naming its step and where it was looked for."""
    file = env.get(SECRETS_FILE_ENV) or None
    from_file = read_secrets_file(Path(file)) if file else {}
    values: dict[str, str] = {}
    missing: list[str] = []
    for name, step in workflow.steps.items():
        for secret in step.secrets:
            value = from_file.get(secret, env.get(secret))
            if value is None:
                missing.append(f"step {name!r} needs secret {secret!r}")
            elif value == "":
                missing.append(f"step {name!r} needs secret {secret!r}, which is empty")
            else:
                values[secret] = value
    if missing:
        where = f"the secrets file {file} and the environment" if file else "the environment"
        again = "; secrets are never stored with a run, so a resume needs them again" if resume else ""
        raise UsageError(
            "; ".join(missing) + f": looked in {where}; set NAME in the environment of hetflow or give "
            f"--secrets-file FILE (NAME=VALUE lines){again}"
        )
    return Secrets(values, file)


def gather_available(names: Iterable[str], env: Mapping[str, str]) -> Secrets:
    """What a reader (``hetflow logs``) can mask: the values of ``names`` that this process's
    environment or secrets file holds, the others left out (a reader needs none)."""
    file = env.get(SECRETS_FILE_ENV) or None
    try:
        from_file = read_secrets_file(Path(file)) if file else {}
    except UsageError:
        from_file = {}
    values = {n: v for n in names if (v := from_file.get(n, env.get(n)))}
    return Secrets(values, file)


def mask(text: str, secrets: Secrets | None = None) -> str:
    """``text`` with every value of ``secrets`` (default: this process's) replaced by ***,
    the longest first (a value inside another is masked with it)."""
    values = (secrets or _active).values
    if not values or not text:
        return text
    for value in sorted(set(values.values()), key=len, reverse=True):
        text = text.replace(value, MASK)
    return text


def scrub_logs(log: Path) -> None:
    """Rewrite an ended attempt's log (and its gang replicas' ``.rankN.log`` beside it) with
    every active value masked: what the step printed stays readable, the value does not stay
    on disk.  Replaced atomically, keeping the file's mode; a file without a value is left alone."""
    values = sorted({v.encode() for v in _active.values.values()}, key=len, reverse=True)
    if not values:
        return
    stem = log.name.removesuffix(".log")
    for path in [log, *log.parent.glob(f"{stem}.rank*.log")]:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        scrubbed = data
        for value in values:
            scrubbed = scrubbed.replace(value, MASK.encode())
        if scrubbed == data:
            continue
        tmp = path.with_name(path.name + ".scrub")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, path.stat().st_mode & 0o777)
        with os.fdopen(fd, "wb") as f:
            f.write(scrubbed)
        os.replace(tmp, path)


def salt(home: Path) -> bytes:
    """This home's random salt (made once, mode 0600): a digest in the cache key cannot be
    tried against guessed values without it."""
    path = home / SALT_FILE
    try:
        return path.read_bytes()
    except FileNotFoundError:
        pass
    home.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes()  # another process made it first
    with os.fdopen(fd, "wb") as f:
        f.write(_random.token_bytes(32))
    return path.read_bytes()


def secret_digests(names: Iterable[str], home: Path, secrets: Secrets | None = None) -> dict[str, str]:
    """NAME -> HMAC-SHA256(salt, value) for each named secret with a value (empty: none)."""
    values = (secrets or _active).of(names)
    if not values:
        return {}
    key = salt(home)
    return {n: hmac.new(key, v.encode(), hashlib.sha256).hexdigest() for n, v in sorted(values.items())}
