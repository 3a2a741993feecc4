"""What every backend says alike: exit codes for jobs that ended without one of their own,
and the parsing of a backend's section of hetflow's settings (config file values arrive
as YAML values or as strings, from HETFLOW_* variables).

Written once here so that the backends agree; a backend with a word of its own (Slurm's
``scontrol`` ExitCode) turns it into these values in its own package.
"""

from __future__ import annotations

from collections.abc import Mapping

from hetflow.config import find_engine
from hetflow.errors import EngineError
from hetflow.execute.backends.local.podman import CliEngine

__all__ = [
    "KILLED_CODE",
    "LOST_CODE",
    "TERMINATED_CODE",
    "TIMEOUT_CODE",
    "first_line",
    "flag",
    "host_image_id",
    "pairs",
    "signal_code",
    "text",
]

# Codes as a shell reports a process ended by a signal: 128 + the signal's number.
TERMINATED_CODE = 143  # SIGTERM: scancel, or a cancel before the container recorded anything
KILLED_CODE = 137  # SIGKILL: what `podman stop` gives a container that ignores SIGTERM
TIMEOUT_CODE = 124  # timeout(1)'s code: the engine's time limit was reached
LOST_CODE = 255  # the job ended, and nothing says how

_TRUE = ("1", "true", "yes", "on")


def signal_code(code: int, signal: int) -> int:
    """One exit code from an engine's (code, signal) pair, as a shell would report it
    (Slurm's ``ExitCode=CODE:SIGNAL``, scontrol(1) and sacct(1))."""
    return code or (128 + signal if signal else 0)


def flag(value: object) -> bool:
    """A yes/no setting: YAML's booleans, or one of 1, true, yes, on (any case)."""
    return str(value).strip().lower() in _TRUE


def text(m: Mapping[str, object], key: str) -> str | None:
    """A string setting; None when missing or empty."""
    v = m.get(key)
    return None if v is None or v == "" else str(v)


def pairs(value: object) -> dict[str, str]:
    """A mapping setting: a YAML mapping, or ``"key=value,key=value"``."""
    if isinstance(value, Mapping):
        return {str(k): str(x) for k, x in value.items()}
    entries = (e.partition("=") for e in str(value or "").split(","))
    return {k.strip(): x.strip() for k, _, x in entries if k.strip()}


def first_line(message: object, default: str = "") -> str:
    """The first line of an engine's message (an exception's text can run to pages)."""
    lines = str(message).strip().splitlines()
    return lines[0] if lines else default


def host_image_id(image: str, env: Mapping[str, str]) -> str | None:
    """A cluster backend's ``image_id``: this machine's podman's answer (run with ``env``),
    or None when no engine is here.  A cached result is then reused only where the nodes hold
    the image this machine holds under that name: they do when they share its image store, as
    the test clusters do, and a pinned digest says it for every node.  Slurm and Ray ask alike."""
    try:
        return CliEngine(find_engine(env), env).image_id(image)
    except EngineError:
        return None
