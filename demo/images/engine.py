"""The commands the builders run: each failure an ``EngineError`` that says what to do, and
podman (with hetflow's containers.conf) behind the ``ImageEngine`` seam tests fake."""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hetflow.config import engine_env, find_engine
from hetflow.errors import EngineError

Log = Callable[[str], None]


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n  ".join(kept) or "(no output)"


def show_command(cmd: Sequence[str]) -> str:
    shown = " ".join(cmd)
    return shown if len(shown) <= 160 else shown[:157] + "..."


def run_tool(
    cmd: Sequence[str],
    *,
    what: str,
    hint: str,
    env: Mapping[str, str] | None = None,
    stdin: int | None = None,
    timeout: float = 3600,
) -> str:
    """Run cmd and return its stdout; any failure becomes an EngineError saying what
    was being done, the command, the end of its output, and what to do about it."""
    try:
        done = subprocess.run(
            list(cmd), env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError as exc:
        raise EngineError(f"{what}: {cmd[0]} is not installed. {hint}") from exc
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"{what}: `{show_command(cmd)}` ran past {timeout:.0f}s. {hint}") from exc
    if done.returncode != 0:
        raise EngineError(
            f"{what}: `{show_command(cmd)}` exited {done.returncode}:\n  {_tail(done.stderr or done.stdout)}\n{hint}"
        )
    return done.stdout


class ImageEngine(Protocol):
    """The image operations the builders need: the seam tests replace with a fake."""

    def exists(self, name: str) -> bool: ...
    def image_id(self, name: str) -> str: ...
    def label(self, name: str, key: str) -> str: ...
    def build(self, containerfile: Path, context: Path, name: str) -> None: ...
    def import_dir(self, root: Path, name: str, changes: Sequence[str]) -> None: ...
    def drop(self, image_id: str) -> None: ...
    def run(self, *args: str, what: str, stdin: int | None = None) -> str: ...


@dataclass(frozen=True)
class Podman:
    """The engine commands this module needs, run with hetflow's containers.conf."""

    binary: str
    env: Mapping[str, str]

    @classmethod
    def default(cls) -> Podman:
        return cls(find_engine(), engine_env())

    def run(self, *args: str, what: str, stdin: int | None = None) -> str:
        hint = "See the message above; `podman info` shows whether the engine works."
        return run_tool([self.binary, *args], what=what, hint=hint, env=self.env, stdin=stdin)

    def exists(self, name: str) -> bool:
        cmd = [self.binary, "image", "exists", name]
        return subprocess.run(cmd, env=self.env, capture_output=True, check=False).returncode == 0

    def image_id(self, name: str) -> str:
        if not self.exists(name):
            return ""
        return self.run("image", "inspect", "--format", "{{.Id}}", name, what="inspect").strip()

    def label(self, name: str, key: str) -> str:
        """The label's value, or "" when the image or the label is missing."""
        if not self.exists(name):
            return ""
        fmt = f'{{{{ index .Labels "{key}" }}}}'
        value = self.run("image", "inspect", "--format", fmt, name, what="inspect").strip()
        return "" if value == "<no value>" else value

    def build(self, containerfile: Path, context: Path, name: str) -> None:
        # --pull=never: every FROM here is a localhost image; there is no registry.
        # --layers=false: no intermediate images; the content hash, not the layer cache,
        # decides what is rebuilt.
        args = ["build", "--pull=never", "--layers=false", "-q", "-f", str(containerfile), "-t", name, str(context)]
        self.run(*args, what=f"building {name}")

    def import_dir(self, root: Path, name: str, changes: Sequence[str]) -> None:
        """`tar -C root -c . | podman import --change ... - name`."""
        flags = [arg for change in changes for arg in ("--change", change)]
        with tempfile.TemporaryFile() as tar_err:
            tar_cmd = ["tar", "--numeric-owner", "-C", str(root), "-c", "."]
            tar = subprocess.Popen(tar_cmd, stdout=subprocess.PIPE, stderr=tar_err)
            assert tar.stdout is not None  # for mypy: stdout=PIPE
            try:
                self.run("import", "-q", *flags, "-", name, what=f"importing {name}", stdin=tar.stdout.fileno())
            finally:
                tar.stdout.close()
                code = tar.wait()
            if code != 0:
                tar_err.seek(0)
                raise EngineError(
                    f"importing {name}: `tar -C {root} -c .` exited {code}:\n"
                    f"  {_tail(tar_err.read().decode(errors='replace'))}"
                )

    def drop(self, image_id: str) -> None:
        """Remove an image a rebuild left untagged; if something still uses it, keep it."""
        cmd = [self.binary, "rmi", image_id]
        subprocess.run(cmd, env=self.env, capture_output=True, check=False)


def log_took(log: Log, message: str, started: float) -> None:
    log(f"{message} ({time.monotonic() - started:.1f}s)")
