"""Images in podman's local storage (``localhost/NAME``): a manifest list read with ``podman
manifest inspect``, a plain image with ``podman image inspect``.  ``LocalImages`` is the seam
(tests pass a fake), ``PodmanImages`` the real one, with hetflow's containers.conf.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hetflow.config import engine_env, find_engine
from hetflow.errors import EngineError
from hetflow.probecache import image_fact


@dataclass(frozen=True)
class LocalImage:
    """A plain image in local storage."""

    id: str
    digest: str
    os: str
    architecture: str
    variant: str | None = None
    size: int = 0


class LocalImages(Protocol):
    """Local image storage: the seam tests replace with a fake."""

    def manifest_list(self, name: str) -> bytes | None:
        """The raw manifest list when ``name`` is one, else None."""
        ...

    def image(self, name: str) -> LocalImage | None:
        """The image called ``name``, or None when there is none."""
        ...


@dataclass(frozen=True)
class PodmanImages:
    """Local storage through podman, with hetflow's containers.conf."""

    binary: str
    env: Mapping[str, str]

    @classmethod
    def default(cls) -> PodmanImages:
        return cls(find_engine(), engine_env())

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        try:
            return subprocess.run(
                [self.binary, *args], env=dict(self.env), capture_output=True, text=True, timeout=120, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise EngineError(f"`{self.binary} {' '.join(args)}` failed: {exc}") from exc

    def _remembered(self, what: str, name: str, probe: Callable[[], Any]) -> Any:
        """``probe()``, kept while podman's image store is unchanged (``hetflow.probecache``)."""
        return image_fact(self.binary, self.env, what, name, probe)

    def manifest_list(self, name: str) -> bytes | None:
        text = self._remembered("manifest", name, lambda: self._manifest_list(name))
        return None if text is None else str(text).encode()

    def _manifest_list(self, name: str) -> str | None:
        # `manifest exists` first: `manifest inspect` of a name that is no list goes on to
        # ask a registry called "localhost".
        if self._run("manifest", "exists", name).returncode != 0:
            return None
        done = self._run("manifest", "inspect", name)
        if done.returncode != 0:
            raise EngineError(f"`podman manifest inspect {name}` exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def image(self, name: str) -> LocalImage | None:
        found = self._remembered("image", name, lambda: self._image(name))
        try:
            return None if found is None else LocalImage(**found)
        except TypeError:  # kept by another hetflow
            fresh = self._image(name)
            return None if fresh is None else LocalImage(**fresh)

    def _image(self, name: str) -> dict[str, Any] | None:
        done = self._run("image", "inspect", "--format", "json", name)
        if done.returncode != 0:
            return None
        try:
            data = json.loads(done.stdout)[0]
        except (ValueError, IndexError, KeyError) as exc:
            raise EngineError(f"`podman image inspect {name}` printed something that is not its JSON") from exc
        return dataclasses.asdict(
            LocalImage(
                id=str(data.get("Id", "")),
                digest=str(data.get("Digest", "")),
                os=str(data.get("Os") or "linux"),
                architecture=str(data.get("Architecture") or "amd64"),
                variant=data.get("Variant") or None,
                size=int(data.get("Size") or 0),
            )
        )
