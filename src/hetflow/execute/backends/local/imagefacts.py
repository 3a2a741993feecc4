"""What podman's local storage says of an image (is it there, its ID), for ``CliEngine``.

Each answer is kept between commands while the image store is unchanged
(``hetflow.probecache.image_fact``): `hetflow validate` and `run --dry-run` of a 20-step
workflow asked podman once per image and command, 30-40 ms each."""

from __future__ import annotations

import subprocess

from hetflow.probecache import image_fact


class ImageFacts:
    """Mixed into ``CliEngine``, which provides ``binary``, ``_env`` and ``_run``."""

    binary: str
    _env: dict[str, str]

    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        raise NotImplementedError  # CliEngine's

    def image_exists(self, image: str) -> bool:
        return bool(image_fact(self.binary, self._env, "exists", image, lambda: self._exists(image)))

    def _exists(self, image: str) -> bool:
        return self._run(["image", "exists", image], check=False).returncode == 0

    def image_id(self, image: str) -> str | None:
        """The ID of the image the name points at now (None when there is none)."""
        found = image_fact(self.binary, self._env, "id", image, lambda: self._inspect_id(image))
        return str(found) if found else None

    def _inspect_id(self, image: str) -> str | None:
        proc = self._run(["image", "inspect", "--format", "{{.Id}}", image], check=False)
        text = proc.stdout.strip()
        return text if proc.returncode == 0 and text else None
