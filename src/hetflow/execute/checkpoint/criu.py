"""Which CRIU hetflow checkpoints with, and whether it works here.

Looked for in order: ``$HETFLOW_CRIU``, ``PREFIX/libexec/hetflow/criu`` (``make criu`` builds
CRIU 4.1.1 there: Debian 12's 3.17 fails on current kernels), then ``criu`` on PATH.  It works
when ``criu check`` passes, the engine is podman (docker's checkpoints are experimental) and
hetflow runs as root (CRIU needs it; rootless podman cannot checkpoint).  The answer is a
``CriuSupport`` that ``hetflow nodes`` prints and ``validate``/``run`` refuse ``checkpoint:`` with.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hetflow.probecache import remembered, stamp

CRIU_ENV = "HETFLOW_CRIU"
BUILT = Path(sys.prefix) / "libexec" / "hetflow" / "criu"


@dataclass(frozen=True)
class CriuSupport:
    ok: bool
    path: str | None
    version: str
    reason: str  # why not (empty when ok)

    def describe(self) -> str:
        if self.ok:
            return f"yes: CRIU {self.version} ({self.path})"
        return f"no: {self.reason}"

    def on_path(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with this CRIU's folder first on PATH: podman's runtime runs ``criu`` from there."""
        return {**env, "PATH": f"{self.directory}:{env.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"}

    @property
    def directory(self) -> str:
        """The folder to put first on PATH for podman's runtime to find this CRIU."""
        return str(Path(self.path).parent) if self.path else ""


def find_criu(env: Mapping[str, str]) -> str | None:
    given = env.get(CRIU_ENV)
    if given:
        return given
    if BUILT.is_file() and os.access(BUILT, os.X_OK):
        return str(BUILT)
    return shutil.which("criu", path=env.get("PATH"))


def criu_support(env: Mapping[str, str] | None = None, *, engine: str = "podman") -> CriuSupport:
    """Whether podman can checkpoint containers here, and with which CRIU (asked once per
    process and CRIU binary: ``criu check`` takes about 50 ms)."""
    env = os.environ if env is None else env
    path = find_criu(env)
    if engine != "podman":
        return CriuSupport(False, path, "", f"the engine is {engine}; checkpoints need podman")
    if path is None:
        return CriuSupport(False, None, "", "no CRIU found: run 'make criu' (or set HETFLOW_CRIU to a criu binary)")
    return _check(path, os.geteuid())


@functools.lru_cache(maxsize=8)
def _check(path: str, euid: int) -> CriuSupport:
    if euid != 0:
        return CriuSupport(False, path, "", "CRIU needs root (rootless podman cannot checkpoint); run hetflow as root")
    # kept between commands (``hetflow.probecache``) while the binary and the kernel are the same
    key = f"{stamp([path])}\0{os.uname().release}\0{os.uname().version}"
    answer = remembered("criu", key, lambda: dataclasses.asdict(_run_check(path)))
    try:
        return CriuSupport(**answer)
    except TypeError:  # written by another hetflow
        return _run_check(path)


def _run_check(path: str) -> CriuSupport:
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        check = subprocess.run([path, "check"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return CriuSupport(False, path, "", f"{path} cannot run: {exc}")
    ver = next((ln.split(":", 1)[1].strip() for ln in version.splitlines() if ln.startswith("Version:")), "?")
    if check.returncode != 0:
        why = last_line(check.stderr or check.stdout, f"exit {check.returncode}")
        hint = " (Debian 12's CRIU 3.17 fails on this kernel: run 'make criu')" if ver.startswith("3.") else ""
        return CriuSupport(False, path, ver, f"'{path} check' fails: {why}{hint}")
    return CriuSupport(True, path, ver, "")


def last_line(text: str, default: str = "no message") -> str:
    """The last line with words of a tool's output (podman's, CRIU's): the one that says why."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else default
