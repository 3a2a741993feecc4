"""What a task must be for this server to accept it (else a 400 that names the field and
what to change), and what it becomes as stored: backend_parameters keys lowercased, the
unsupported ones dropped with a warning for the task's system log (TES 1.1: "backends shall
not store or return unsupported keys"), or the task refused when ``backend_parameters_strict``.

URLs: ``content`` and file:// under the configured roots run here; s3:// is accepted and
fetched through hetflow's S3 data layer when the server has an S3 endpoint, else the task
ends SYSTEM_ERROR saying so; http(s) and other schemes are refused, since this server has no
network to fetch them from."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from hetflow.tes.messages import Task
from hetflow.tes.service.config import TesConfig
from hetflow.tes.service.gpus import GPU_KEYS, BadAsk, GpuAsk, parse_ask

# backend_parameters this server honours (keys are case-insensitive, TES 1.1)
SUPPORTED_PARAMETERS = GPU_KEYS


class Refused(ValueError):
    """The request cannot be accepted: the message says which field and what to change."""


@dataclass(frozen=True)
class Accepted:
    task: Task
    warnings: tuple[str, ...]
    gpus: int
    ask: GpuAsk | None = None
    strict: bool = False


def accept(task: Task, config: TesConfig) -> Accepted:
    warnings: list[str] = []
    for i, ex in enumerate(task.executors):
        if not ex.image.strip():
            raise Refused(f"executors[{i}].image is empty; name an image")
        for key in ("workdir", "stdout", "stderr"):
            value = getattr(ex, key)
            if value is not None:
                container_path(value, f"executors[{i}].{key}")
        if ex.stdin is not None:
            raise Refused(
                f"executors[{i}].stdin: not supported by this server (its containers run detached); "
                "give the file as an argument instead"
            )
    for i, inp in enumerate(task.inputs or []):
        container_path(inp.path, f"inputs[{i}].path")
        if inp.content is None:
            if not inp.url:
                raise Refused(f"inputs[{i}]: give a url or content")
            check_url(inp.url, f"inputs[{i}].url", config)
    for i, out in enumerate(task.outputs or []):
        container_path(out.path, f"outputs[{i}].path")
        if out.path_prefix is not None and not out.path.startswith(out.path_prefix):
            raise Refused(f"outputs[{i}].path_prefix {out.path_prefix!r} is not a prefix of its path {out.path!r}")
        check_url(out.url, f"outputs[{i}].url", config)
    for i, vol in enumerate(task.volumes or []):
        container_path(vol, f"volumes[{i}]")
    resources = task.resources
    ask: GpuAsk | None = None
    if resources is not None and resources.backend_parameters:
        kept: dict[str, str] = {}
        for key, value in resources.backend_parameters.items():
            low = key.lower()
            if low in SUPPORTED_PARAMETERS:
                kept[low] = value
            elif resources.backend_parameters_strict:
                raise Refused(
                    f"resources.backend_parameters: {key!r} is not supported here (backend_parameters_strict is "
                    f"true); this server supports {', '.join(SUPPORTED_PARAMETERS)}"
                )
            else:
                warnings.append(f"backend_parameters: {key!r} is not supported here and was ignored")
        try:
            ask = parse_ask(kept)
        except BadAsk as exc:
            raise Refused(str(exc)) from None
        resources = resources.model_copy(update={"backend_parameters": kept})
        task = task.model_copy(update={"resources": resources})
    strict = bool(resources and resources.backend_parameters_strict)
    return Accepted(task, tuple(warnings), ask.count if ask else 0, ask, strict)


def container_path(path: str, field: str) -> str:
    if not path.startswith("/") or posixpath.normpath(path) in ("/", "//"):
        raise Refused(f"{field}: {path!r} must be an absolute path inside the container, not /")
    if ".." in path.split("/"):
        raise Refused(f"{field}: {path!r} must not contain '..'")
    return posixpath.normpath(path)


def check_url(url: str, field: str, config: TesConfig) -> None:
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        return
    if parsed.scheme in ("http", "https", "ftp", "gs", "htsget", "drs"):
        raise Refused(
            f"{field}: {parsed.scheme}:// URLs cannot be fetched here: this server has no network; "
            "use file:// under a file root, s3:// or content"
        )
    if parsed.scheme == "file" or (parsed.scheme == "" and url.startswith("/")):
        if parsed.netloc not in ("", "localhost"):
            raise Refused(f"{field}: file://{parsed.netloc}/... names another host; give file:///PATH")
        host = Path(unquote(parsed.path))
        if not config.under_roots(host):
            roots = ", ".join(str(r) for r in config.file_roots) or "none configured (--file-root DIR)"
            raise Refused(f"{field}: {host} is outside the server's file roots ({roots})")
        return
    raise Refused(f"{field}: {url!r}: unsupported scheme; use file://, s3:// or content")


def host_path(url: str) -> Path:
    """The host path of a file:// URL (or a bare absolute path) accepted by ``check_url``."""
    parsed = urlparse(url)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(url)
