"""Local stand-ins for the Docker Hub images the CWL v1.2 conformance tests name, built with
no registry and tagged with exactly those names, so that podman finds them and never pulls.

    docker.io/debian:stable-slim  debootstrap --variant=minbase bookworm (bash, coreutils,
                                  grep, sed, mawk, findutils, tar, gzip: what the tests call)
    docker.io/python:3-slim       the same with python3 and python-is-python3 (`python`)
    docker.io/bash:4.4            the Debian stand-in plus the bash image's entrypoint, which
                                  runs `bash "$@"` when the first argument is an option
                                  (docker-run-cmd.cwl's baseCommand is ["-c", "..."])
    docker.io/alpine:latest       busybox-static with every applet linked, /bin/sh included

They are stand-ins: Debian 12's bash is 5.2, not 4.4, and "alpine" is busybox without musl
or apk; every test that names them uses only the commands above.  Each image carries a
label with the hash of its recipe and is skipped when the label matches (about a second for
all four when built); the Debian roots are debootstrapped once into
``hetflow_home()/cache`` from the host's own apt mirror, as ``demo.images`` does.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from demo.images.busybox import static_busybox
from demo.images.engine import ImageEngine, Log, Podman, log_took
from demo.images.examples import debootstrap_root
from demo.images.recipes import DEBIAN_PATH, SUITE

from hetflow.config import hetflow_home
from hetflow.errors import HetflowError

LABEL = "hetflow.cwl.standin"

# The bash image's docker-entrypoint.sh (docker-library/bash), which docker-run-cmd.cwl and
# the colon tests rely on: an option as first argument means "bash with these arguments".
BASH_ENTRYPOINT = """#!/bin/bash
set -Eeuo pipefail
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
	exec bash "$@"
fi
exec "$@"
"""


@dataclass(frozen=True)
class StandIn:
    """One stand-in image: its tag, how its root is made ("debian" with ``packages`` added
    by debootstrap, "busybox", or "on:NAME": built on the stand-in NAME), its Containerfile
    instructions (``podman import --change`` values for a root), and files added on top as
    {path in the image: text} (each made executable; "on:" images only)."""

    name: str
    root: str
    packages: tuple[str, ...] = ()
    changes: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)

    def digest(self, salt: str = "") -> str:
        """The recipe's hash, stored in the ``LABEL`` label: a changed recipe is rebuilt."""
        parts = [salt, self.name, self.root, SUITE, *self.packages, *self.changes]
        parts += [f"{path}\0{text}" for path, text in sorted(self.files.items())]
        return hashlib.sha256("\0\0".join(parts).encode()).hexdigest()[:16]


_DEBIAN_CHANGES = (f"ENV PATH={DEBIAN_PATH}", "ENV LANG=C.UTF-8")
STANDINS: tuple[StandIn, ...] = (
    StandIn("docker.io/debian:stable-slim", "debian", (), (*_DEBIAN_CHANGES, 'CMD ["bash"]')),
    StandIn(
        "docker.io/python:3-slim", "debian", ("python3", "python-is-python3"), (*_DEBIAN_CHANGES, 'CMD ["python3"]')
    ),
    StandIn(
        "docker.io/bash:4.4",
        "on:docker.io/debian:stable-slim",
        (),
        ('ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]', 'CMD ["bash"]'),
        {"usr/local/bin/docker-entrypoint.sh": BASH_ENTRYPOINT},
    ),
    StandIn("docker.io/alpine:latest", "busybox", (), ("ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin", 'CMD ["/bin/sh"]')),
)


def root_name(packages: Sequence[str]) -> str:
    """The cache folder of a root with ``packages``: named by their hash."""
    return f"rootfs-{SUITE}-cwl-{hashlib.sha256(' '.join(packages).encode()).hexdigest()[:12]}"


def _busybox_root(root: Path) -> None:
    """busybox-static with a link for each of its applets (``busybox --list-full``)."""
    busybox = static_busybox()
    (root / "bin").mkdir()
    shutil.copyfile(busybox, root / "bin/busybox")
    (root / "bin/busybox").chmod(0o755)
    listed = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=True).stdout
    for rel in listed.split():
        link = root / rel
        if rel != "bin/busybox" and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    (root / "etc").mkdir()
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")
    (root / "etc/group").write_text("root:x:0:\nnobody:x:65534:\n")
    for folder in ("tmp", "root", "var/tmp"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    (root / "tmp").chmod(0o1777)


def _containerfile(image: StandIn, digest: str) -> str:
    """A stand-in made on another stand-in (``root`` "on:NAME"): COPY its files, then its changes."""
    copies = "".join(f"COPY {Path(rel).name} /{rel}\n" for rel in image.files)
    return f"FROM {image.root[3:]}\n{copies}" + "".join(f"{c}\n" for c in image.changes) + f"LABEL {LABEL}={digest}\n"


def _make(podman: ImageEngine, image: StandIn, digest: str, cache: Path, log: Log) -> None:
    """Make one stand-in: import a Debian or busybox root, or build on another stand-in.

    Never copy a Debian root with shutil: debootstrap leaves device nodes in its /dev, and a
    copy reads /dev/zero or /dev/full until the disk is full; tar and podman keep them nodes."""
    changes = [*image.changes, f"LABEL {LABEL}={digest}"]
    if image.root == "debian":
        podman.import_dir(debootstrap_root(cache / root_name(image.packages), log, image.packages), image.name, changes)
        return
    with tempfile.TemporaryDirectory(prefix="hetflow-cwl-image-") as tmp:
        root = Path(tmp)
        if image.root == "busybox":
            _busybox_root(root)
            podman.import_dir(root, image.name, changes)
            return
        for rel, text in image.files.items():
            (root / Path(rel).name).write_text(text)
            (root / Path(rel).name).chmod(0o755)
        (root / "Containerfile").write_text(_containerfile(image, digest))
        podman.build(root / "Containerfile", root, image.name)


def build_standin(podman: ImageEngine, image: StandIn, cache: Path, force: bool, log: Log, salt: str = "") -> bool:
    """Make one stand-in unless an image of that name has the recipe's label (``salt``: the
    id of the image it is built on); True when it was made."""
    digest = image.digest(salt)
    if not force and podman.label(image.name, LABEL) == digest:
        log(f"{image.name}: up to date")
        return False
    started = time.monotonic()
    old = podman.image_id(image.name)
    _make(podman, image, digest, cache, log)
    if old and old != podman.image_id(image.name):
        podman.drop(old)
    log_took(log, f"{image.name}: made", started)
    return True


def build_standins(*, force: bool = False, log: Log = print) -> list[str]:
    """Build (or find up to date) every stand-in; returns their names."""
    podman = Podman.default()
    cache = hetflow_home() / "cache"
    for image in STANDINS:  # in order: one built on another comes after it
        salt = podman.image_id(image.root[3:]) if image.root.startswith("on:") else ""
        build_standin(podman, image, cache, force, log, salt)
    return [image.name for image in STANDINS]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m bench.conformance.images [--force]``: what ``make cwl-images`` runs."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m bench.conformance.images",
        description="Build local stand-ins for the images the CWL conformance tests name (no registry; cached).",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even when the images are up to date")
    args = parser.parse_args(argv)
    try:
        names = build_standins(force=args.force, log=lambda m: print(m, file=sys.stderr, flush=True))
    except HetflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    print("\n".join(names))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
