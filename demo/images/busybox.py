"""The busybox images: the tests' tiny image and the hardware-matched builds of
examples/hwmatch (one static binary per -march in each)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from demo.images.engine import Log, Podman, log_took, run_tool, show_command
from demo.images.recipes import BUSYBOX_APPLETS, HASH_LABEL, TINY_IMAGE, is_static_elf, tiny_import_changes
from hetflow.errors import EngineError

# --- the busybox test image ----------------------------------------------------------


def static_busybox() -> Path:
    """A statically linked busybox (it must run in an image with no libc); installs
    busybox-static with apt when it is missing and we may."""
    for attempt in range(2):
        for candidate in (Path("/bin/busybox"), Path("/usr/bin/busybox")):
            if candidate.is_file():
                with candidate.open("rb") as f:
                    if is_static_elf(f.read(4096)):
                        return candidate
        if attempt == 0 and os.geteuid() == 0 and shutil.which("apt-get"):
            run_tool(
                ["apt-get", "install", "-y", "busybox-static"],
                what="installing busybox-static",
                hint="Run `apt-get update && apt-get install -y busybox-static`.",
                env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
                timeout=600,
            )
    raise EngineError(
        "no statically linked busybox at /bin/busybox; install it with `apt-get install -y busybox-static`"
    )


def build_tiny_image(name: str = TINY_IMAGE, env: dict[str, str] | None = None, force: bool = False) -> str:
    """A busybox-static image with the applets tests use and ``env`` baked in (tests
    pass e.g. NVIDIA_VISIBLE_DEVICES=all for a hostile image).  Skipped when an image
    of that name exists with the same env, unless force; returns the name."""
    changes = tiny_import_changes(env)
    podman = Podman.default()
    wanted = changes[-1].partition("=")[2]  # the label value that records the env
    if not force and podman.label(name, HASH_LABEL) == wanted:
        return name
    busybox = static_busybox()
    with tempfile.TemporaryDirectory(prefix="hetflow-busybox-") as tmp:
        root = Path(tmp)
        (root / "bin").mkdir()
        shutil.copyfile(busybox, root / "bin/busybox")
        (root / "bin/busybox").chmod(0o755)
        for applet in BUSYBOX_APPLETS:
            (root / "bin" / applet).symlink_to("busybox")
        for folder in ("tmp", "out", "in"):
            (root / folder).mkdir()
        (root / "tmp").chmod(0o1777)
        replaced = podman.image_id(name)
        podman.import_dir(root, name, changes)
    if replaced and replaced != podman.image_id(name):
        podman.drop(replaced)
    return name


# --- the hardware-matched builds of examples/hwmatch ----------------------------------

HWMATCH_IMAGE = "localhost/hetflow-examples/whichbuild"
HWMATCH_SOURCE = "hwmatch/whichbuild.c"  # relative to the examples dir
HWMATCH_BINARY = "/usr/local/bin/whichbuild"


@dataclass(frozen=True)
class HwBuild:
    """One build of examples/hwmatch/whichbuild.c: its image tag, the name it prints
    (the BUILD macro), gcc's -march, and what its index entry says it needs (the
    FEATURES of ``hetflow images build-index TAG=FEATURES``; "" is a generic build)."""

    tag: str
    name: str
    march: str
    features: str

    @property
    def image(self) -> str:
        return f"{HWMATCH_IMAGE}:{self.tag}"

    @property
    def index_entry(self) -> str:
        return f"{self.tag}={self.features}" if self.features else self.tag


HWMATCH_BUILDS: tuple[HwBuild, ...] = (
    HwBuild("generic", "generic", "x86-64", ""),
    HwBuild("v3", "v3", "x86-64-v3", "x86-64-v3"),
    # Stands for a CUDA build (nvcc -arch=sm_80, CUDA >= 12.2): there is no CUDA
    # toolkit here, so it is the baseline CPU code under another name.  The index
    # labels it for GPU nodes only.
    HwBuild("gpu", "gpu-sm80", "x86-64", "gpu:sm_80,cuda>=12.2"),
)

_GCC_HINT = "Install the C compiler and the static C library: `apt-get install -y gcc libc6-dev`."


def hwmatch_gcc_args(build: HwBuild, source: Path | str, output: Path | str, gcc: str = "gcc") -> list[str]:
    """The gcc command for one build: -O2, static (the image has no libc), the
    build's -march, and BUILD/MARCH baked in as string macros."""
    return [
        gcc, "-O2", "-static", f"-march={build.march}",
        f'-DBUILD="{build.name}"', f'-DMARCH="{build.march}"',
        "-o", str(output), str(source),
    ]  # fmt: skip


def hwmatch_import_changes(build: HwBuild, digest: str) -> list[str]:
    """``podman import --change`` values for one build's image (values raw, as in
    ``tiny_import_changes``)."""
    return [
        "ENV PATH=/usr/local/bin:/bin",
        f'CMD ["{HWMATCH_BINARY}"]',
        f"LABEL hetflow.examples.build={build.name}",
        f"LABEL hetflow.examples.march={build.march}",
        f"LABEL {HASH_LABEL}={digest}",
    ]


def _gcc_for_static() -> tuple[str, str]:
    """gcc's path and version, once it is known to link static binaries for x86-64."""
    machine = os.uname().machine
    if machine not in ("x86_64", "amd64"):
        raise EngineError(
            f"the hwmatch example builds x86-64 binaries (-march=x86-64-v3); this host is {machine}: "
            "build it on an x86-64 host"
        )
    gcc = shutil.which("gcc")
    if gcc is None:
        raise EngineError(f"building the hwmatch example images needs gcc, which is not installed. {_GCC_HINT}")
    libc = run_tool([gcc, "-print-file-name=libc.a"], what="looking for libc.a", hint=_GCC_HINT, timeout=60).strip()
    if not os.path.isabs(libc) or not os.path.isfile(libc):
        raise EngineError(
            "building the hwmatch example images needs the static C library (libc.a), which gcc "
            "cannot find: `apt-get install -y libc6-dev`"
        )
    version = run_tool([gcc, "--version"], what="asking gcc for its version", hint=_GCC_HINT, timeout=60)
    return gcc, version.splitlines()[0] if version.strip() else "gcc"


def _hwmatch_root(root: Path, busybox: Path, binary: Path) -> None:
    """The image's files: busybox and its applets in /bin, whichbuild in
    /usr/local/bin, and the folders hetflow mounts (/tmp, /in, /out)."""
    (root / "bin").mkdir(mode=0o755)
    shutil.copyfile(busybox, root / "bin/busybox")
    (root / "bin/busybox").chmod(0o755)
    for applet in BUSYBOX_APPLETS:
        (root / "bin" / applet).symlink_to("busybox")
    (root / "usr/local/bin").mkdir(parents=True, mode=0o755)
    for parent in (root / "usr", root / "usr/local", root / "usr/local/bin"):
        parent.chmod(0o755)
    shutil.copyfile(binary, root / HWMATCH_BINARY.lstrip("/"))
    (root / HWMATCH_BINARY.lstrip("/")).chmod(0o755)
    for folder in ("tmp", "out", "in"):
        (root / folder).mkdir(mode=0o755)
    (root / "tmp").chmod(0o1777)


def build_hwmatch_images(examples_dir: Path, force: bool = False, *, log: Log = print) -> list[str]:
    """Build examples/hwmatch/whichbuild.c three ways with the host's gcc and put each
    binary in a busybox image: ``localhost/hetflow-examples/whichbuild:{generic,v3,gpu}``
    (``HWMATCH_BUILDS``).  An image whose ``hetflow.examples.hash`` label matches the
    source, the gcc command and version and the busybox binary is kept unless
    ``force``; returns the image names in ``HWMATCH_BUILDS`` order.

    Raises EngineError when gcc or libc6-dev is missing (naming the apt-get command),
    when a build fails, or when podman does."""
    source = Path(examples_dir) / HWMATCH_SOURCE
    if not source.is_file():
        raise EngineError(f"{source} not found: pass the examples/ folder of a hetflow checkout")
    podman = Podman.default()
    gcc, gcc_version = _gcc_for_static()
    busybox = static_busybox()
    common = hashlib.sha256()
    common.update(source.read_bytes())
    common.update(f"\0{gcc_version}\0{' '.join(BUSYBOX_APPLETS)}\0".encode())
    common.update(busybox.read_bytes())
    started = time.monotonic()
    names = []
    with tempfile.TemporaryDirectory(prefix="hetflow-hwmatch-") as tmp:
        for build in HWMATCH_BUILDS:
            recipe = hwmatch_gcc_args(build, "SOURCE", "OUTPUT", "gcc") + hwmatch_import_changes(build, "")
            digest = hashlib.sha256(common.digest() + "\0".join(recipe).encode()).hexdigest()
            names.append(build.image)
            if not force and podman.label(build.image, HASH_LABEL) == digest:
                log(f"{build.image}: up to date")
                continue
            binary = Path(tmp) / f"whichbuild-{build.tag}"
            cmd = hwmatch_gcc_args(build, source, binary, gcc)
            run_tool(
                cmd,
                what=f"compiling {source.name} for the {build.tag} build",
                hint=f"{_GCC_HINT} -march={build.march} needs gcc 11 or newer ({gcc_version}).",
                timeout=300,
            )
            with binary.open("rb") as f:
                if not is_static_elf(f.read(4096)):
                    raise EngineError(f"`{show_command(cmd)}` made a dynamically linked binary; the image has no libc")
            root = Path(tmp) / f"root-{build.tag}"
            root.mkdir()
            _hwmatch_root(root, busybox, binary)
            replaced = podman.image_id(build.image)
            podman.import_dir(root, build.image, hwmatch_import_changes(build, digest))
            if replaced and replaced != podman.image_id(build.image):
                podman.drop(replaced)
            log(f"{build.image}: built with `{' '.join(hwmatch_gcc_args(build, source.name, 'whichbuild'))}`")
    log_took(log, f"hwmatch: {len(names)} images ready", started)
    return names
