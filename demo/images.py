"""Build the container images that hetflow's examples and tests run, with no registry.

Public API: ``build_examples`` (the NumPy and CuPy images of ``examples/``) and
``build_tiny_image`` (a busybox image for tests).  Nothing is pulled: the Debian base
comes from ``debootstrap`` against the host's own apt mirror and is brought in with
``podman import``; CuPy and the CUDA libraries it needs come from PyPI through the
host's pip.  Every image is skipped when it exists (or, for images with app files in
them, when its ``hetflow.examples.hash`` label matches the files) unless ``force``.

    base:bookworm   debootstrap --variant=minbase --include=python3-numpy  (cached rootfs)
      numpy:latest  + COPY examples/meanpool/app -> /app/meanpool, circuit/app -> /app/circuit
        cupy:latest + CuPy 13 and CUDA 12.4 runtime, NVRTC and cuFFT from PyPI wheels

Every failure a user can cause (no debootstrap, an unreachable mirror, pip failing)
is an ``EngineError`` that names the command and what to install or change.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hetflow.config import engine_env, find_engine, hetflow_home
from hetflow.errors import EngineError, HetflowError

__all__ = [
    "BASE_IMAGE",
    "CUDA_STACK",
    "CUPY_IMAGE",
    "HASH_LABEL",
    "HWMATCH_BUILDS",
    "HWMATCH_IMAGE",
    "MPI_IMAGE",
    "MPI_PACKAGES",
    "NUMPY_IMAGE",
    "TINY_IMAGE",
    "CudaStack",
    "HwBuild",
    "ImageEngine",
    "build_examples",
    "build_hwmatch_images",
    "build_mpi_image",
    "build_tiny_image",
    "content_hash",
    "cupy_containerfile",
    "hwmatch_gcc_args",
    "hwmatch_import_changes",
    "mirror_from_sources",
    "mpi_containerfile",
    "numpy_containerfile",
    "tiny_import_changes",
]

Log = Callable[[str], None]

BASE_IMAGE = "localhost/hetflow-examples/base:bookworm"
NUMPY_IMAGE = "localhost/hetflow-examples/numpy:latest"
CUPY_IMAGE = "localhost/hetflow-examples/cupy:latest"
MPI_BASE_IMAGE = "localhost/hetflow-examples/mpi-base:bookworm"
MPI_IMAGE = "localhost/hetflow-examples/mpi:latest"
TINY_IMAGE = "localhost/hetflow-test/busybox:latest"
HASH_LABEL = "hetflow.examples.hash"

SUITE = "bookworm"
DEBIAN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Debian's python3.11 searches this directory before its own dist-packages, so wheels
# copied here are found without pip in the image.
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"
# Example app folders (relative to the examples dir) and where the image holds them.
APPS: Mapping[str, str] = {"meanpool/app": "/app/meanpool", "circuit/app": "/app/circuit"}
MPI_APPS: Mapping[str, str] = {"gang/app": "/app/gang"}
# The MPI image's Debian packages, all from debootstrap (no network needed in a build):
# Open MPI and mpi4py for `launcher: mpi` gangs, sshd and ssh for mpirun's rsh launcher.
MPI_PACKAGES = (
    "python3-numpy", "python3-mpi4py", "openmpi-bin", "openssh-server", "openssh-client",
)  # fmt: skip
BUSYBOX_APPLETS = (
    "sh", "true", "false", "cat", "ls", "grep", "sleep", "echo", "id", "env", "test",
    "sed", "wc", "head", "find", "stat", "touch", "mkdir", "sha256sum",
)  # fmt: skip
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class CudaStack:
    """The CUDA pieces in the CuPy image, pinned so the image is reproducible.

    CuPy 13 links the CUDA runtime statically and loads the rest as shared libraries;
    only what the examples use is installed: NVRTC compiles elementwise and reduction
    kernels, cuFFT serves the litho step.  The runtime wheel is there for its headers:
    NVRTC of CUDA >= 12.2 needs them for cuda_fp16.h, and CuPy only uses them when
    their major.minor equals NVRTC's (cupy/_environment.py,
    _get_include_dir_from_conda_or_wheel).  cuBLAS (about 600 MB), cuRAND, cuSPARSE and
    cuSOLVER are left out: the GPU code makes its random numbers on the host and uses
    no matmul or dot.  Any driver >= 525.60.13 runs CUDA 12.x code (CUDA minor
    version compatibility)."""

    cuda: str = "12.4"
    cupy: str = "13.6.0"
    min_driver: str = "525.60.13"
    wheels: tuple[str, ...] = (
        "cupy-cuda12x==13.6.0",
        "fastrlock==0.8.4",
        "nvidia-cuda-runtime-cu12==12.4.127",
        "nvidia-cuda-nvrtc-cu12==12.4.127",
        "nvidia-cufft-cu12==11.2.1.3",
    )
    lib_dirs: tuple[str, ...] = ("cuda_runtime", "cuda_nvrtc", "cufft")


CUDA_STACK = CudaStack()


# --- pure pieces (unit-tested) ---------------------------------------------------------


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    """The paragraphs of a deb822 file as {lower-cased field: value}, comments dropped."""
    stanzas = []
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line.strip() and not line.lstrip().startswith("#") and ":" in line:
                key, _, value = line.partition(":")
                fields[key.strip().lower()] = value.strip()
        stanzas.append(fields)
    return stanzas


def mirror_from_sources(deb822: Iterable[str], one_line: Iterable[str], suite: str = SUITE) -> str | None:
    """The first mirror URI serving ``suite``, from apt's deb822 ``.sources`` texts or
    one-line ``sources.list`` texts (sources.list(5)); None when no entry serves it."""
    for text in deb822:
        for fields in _deb822_stanzas(text):
            if (
                fields.get("enabled", "yes").lower() != "no"
                and "deb" in fields.get("types", "").split()
                and suite in fields.get("suites", "").split()
                and fields.get("uris")
            ):
                return fields["uris"].split()[0]
    for text in one_line:
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                return words[1]
    return None


def app_files(root: Path) -> list[Path]:
    """Files under root that go into an image: no caches, no hidden files."""
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and not p.name.startswith(".") and p.suffix != ".pyc"
    )


def content_hash(roots: Mapping[str, Path], salt: str = "") -> str:
    """sha256 over every app file's name (relative to its root's key) and bytes, plus
    salt (the base image id and the Containerfile), so any change means a rebuild."""
    digest = hashlib.sha256(salt.encode())
    for key in sorted(roots):
        for path in app_files(roots[key]):
            digest.update(f"\0{key}/{path.relative_to(roots[key]).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def numpy_containerfile(digest: str, base: str = BASE_IMAGE) -> str:
    """The NumPy image: the Debian base plus the example apps; COPY only, no RUN."""
    copies = "".join(f"COPY {Path(src).parent.name} {dst}\n" for src, dst in APPS.items())
    return (
        f"FROM {base}\n"
        f'LABEL {HASH_LABEL}="{digest}"\n'
        f"{copies}"
        # The root fs is read-only at run time: don't let Python try to write .pyc files.
        "ENV PYTHONDONTWRITEBYTECODE=1\n"
        "WORKDIR /tmp\n"
    )


def mpi_containerfile(digest: str, base: str = MPI_BASE_IMAGE) -> str:
    """The MPI image: the Debian+Open MPI+sshd base plus examples/gang/app; COPY only."""
    copies = "".join(f"COPY {Path(src).parent.name} {dst}\n" for src, dst in MPI_APPS.items())
    return f'FROM {base}\nLABEL {HASH_LABEL}="{digest}"\n{copies}ENV PYTHONDONTWRITEBYTECODE=1\nWORKDIR /tmp\n'


def cupy_containerfile(digest: str, stack: CudaStack = CUDA_STACK, base: str = NUMPY_IMAGE) -> str:
    """The CuPy image: the NumPy image plus pip-installed wheels (the build context)."""
    lib_path = ":".join(f"{SITE_PACKAGES}/nvidia/{d}/lib" for d in stack.lib_dirs)
    return (
        f"FROM {base}\n"
        f'LABEL {HASH_LABEL}="{digest}" hetflow.cuda="{stack.cuda}" '
        f'hetflow.cuda.min_driver="{stack.min_driver}" hetflow.cupy="{stack.cupy}"\n'
        f"COPY . {SITE_PACKAGES}/\n"
        # CuPy 13 does not look for CUDA libraries inside pip's nvidia/ wheels; the
        # dynamic loader has to find them.  Its kernel cache must be on the tmpfs.
        f"ENV LD_LIBRARY_PATH={lib_path} CUPY_CACHE_DIR=/tmp/.cupy/kernel_cache\n"
    )


def tiny_import_changes(env: Mapping[str, str] | None = None) -> list[str]:
    """``podman import --change`` values for the busybox image: PATH, env, and a label
    recording them and the applets, so an image of the same name built with another env
    (or by an older hetflow) is rebuilt.

    podman's --change parser takes everything after the first '=' as the value, quotes
    included, so values are passed raw (and may not hold a newline)."""
    changes = ["ENV PATH=/bin"]
    for key, value in (env or {}).items():
        if not _ENV_KEY.match(key):
            raise ValueError(f"environment variable name {key!r} is not a shell identifier")
        if "\n" in value:
            raise ValueError(f"environment variable {key} has a newline in its value")
        changes.append(f"ENV {key}={value}")
    digest = hashlib.sha256("\n".join([*changes, *BUSYBOX_APPLETS]).encode()).hexdigest()[:16]
    return [*changes, f"LABEL {HASH_LABEL}={digest}"]


def is_static_elf(head: bytes) -> bool:
    """True for a 64-bit little-endian ELF with no PT_INTERP program header (elf(5)):
    such a binary runs in an image that has no dynamic loader."""
    if head[:6] != b"\x7fELF\x02\x01":  # magic, ELFCLASS64, ELFDATA2LSB
        return False
    phoff = int.from_bytes(head[0x20:0x28], "little")
    size = int.from_bytes(head[0x36:0x38], "little")
    count = int.from_bytes(head[0x38:0x3A], "little")
    for i in range(count):
        start = phoff + i * size
        if start + 4 > len(head):
            return False
        if int.from_bytes(head[start : start + 4], "little") == 3:  # PT_INTERP
            return False
    return True


# --- commands ------------------------------------------------------------------------


def _tail(text: str, lines: int = 8) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()][-lines:]
    return "\n  ".join(kept) or "(no output)"


def _show(cmd: Sequence[str]) -> str:
    shown = " ".join(cmd)
    return shown if len(shown) <= 160 else shown[:157] + "..."


def _run(
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
        raise EngineError(f"{what}: `{_show(cmd)}` ran past {timeout:.0f}s. {hint}") from exc
    if done.returncode != 0:
        raise EngineError(
            f"{what}: `{_show(cmd)}` exited {done.returncode}:\n  {_tail(done.stderr or done.stdout)}\n{hint}"
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
class _Podman:
    """The engine commands this module needs, run with hetflow's containers.conf."""

    binary: str
    env: Mapping[str, str]

    @classmethod
    def default(cls) -> _Podman:
        return cls(find_engine(), engine_env())

    def run(self, *args: str, what: str, stdin: int | None = None) -> str:
        hint = "See the message above; `podman info` shows whether the engine works."
        return _run([self.binary, *args], what=what, hint=hint, env=self.env, stdin=stdin)

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


def _timed(log: Log, message: str, started: float) -> None:
    log(f"{message} ({time.monotonic() - started:.1f}s)")


# --- the Debian base -----------------------------------------------------------------


def debian_mirror(apt_dir: Path = Path("/etc/apt")) -> str:
    """The host's Debian mirror for bookworm, read from apt's configuration."""
    deb822 = [p.read_text() for p in sorted((apt_dir / "sources.list.d").glob("*.sources"))]
    lists = [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]
    mirror = mirror_from_sources(deb822, [p.read_text() for p in lists if p.is_file()])
    if mirror is None:
        raise EngineError(
            f"no apt source for Debian {SUITE} in {apt_dir}/sources.list(.d); debootstrap "
            "needs a mirror: add one (see sources.list(5)) or build on a Debian 12 host"
        )
    return mirror


# Not needed to run a step (docs, translations, apt's download caches).
_PRUNE = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "var/cache/apt", "var/lib/apt/lists")


def _debootstrap(target: Path, log: Log, include: Sequence[str] = ("python3-numpy",)) -> Path:
    """Create a bookworm rootfs with ``include`` (default: NumPy) once; later calls reuse it (delete the folder
    to start over).  It is built beside its final name and renamed when complete, so
    an interrupted run never leaves a half rootfs that looks usable."""
    done = target.with_name(target.name + ".ok")
    if done.is_file() and (target / "usr/bin/python3").exists():
        log(f"rootfs: reusing {target}")
        return target
    if os.geteuid() != 0:
        raise EngineError(f"debootstrap needs root to build {target}; run as root")
    mirror = debian_mirror()
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"rootfs: debootstrap {SUITE} from {mirror} into {partial} (about a minute)")
    _run(
        ["debootstrap", "--variant=minbase", f"--include={','.join(include)}", SUITE, str(partial), mirror],
        what=f"debootstrap of a Debian base with {', '.join(include)}",
        hint=f"It needs `apt-get install -y debootstrap` and a reachable mirror ({mirror}, from "
        f"/etc/apt/sources.list.d); its log is {partial}/debootstrap/debootstrap.log.",
        timeout=1800,
    )
    for rel in _PRUNE:
        shutil.rmtree(partial / rel, ignore_errors=True)
    partial.rename(target)
    done.write_text(f"{SUITE} {mirror} {','.join(include)}\n")
    _timed(log, f"rootfs: {target} ready", started)
    return target


def _build_base(podman: ImageEngine, cache: Path, force: bool, log: Log) -> str:
    """Import the base image unless it exists; returns the replaced image id."""
    if not force and podman.exists(BASE_IMAGE):
        log(f"{BASE_IMAGE}: exists")
        return ""
    rootfs = _debootstrap(cache / f"rootfs-{SUITE}-numpy", log)
    old = podman.image_id(BASE_IMAGE)
    started = time.monotonic()
    changes = [f"ENV PATH={DEBIAN_PATH}", "ENV LANG=C.UTF-8", 'CMD ["python3"]', f"LABEL hetflow.debian.suite={SUITE}"]
    podman.import_dir(rootfs, BASE_IMAGE, changes)
    _timed(log, f"{BASE_IMAGE}: imported", started)
    return old


def _build_mpi_base(podman: ImageEngine, cache: Path, force: bool, log: Log) -> str:
    """Import the MPI base (bookworm + ``MPI_PACKAGES``, all from debootstrap so the
    image build needs no network) unless an image with the same package list exists;
    returns the replaced image id."""
    packages = hashlib.sha256(" ".join(MPI_PACKAGES).encode()).hexdigest()[:12]
    if not force and podman.label(MPI_BASE_IMAGE, "hetflow.debian.packages") == packages:
        log(f"{MPI_BASE_IMAGE}: exists")
        return ""
    rootfs = _debootstrap(cache / f"rootfs-{SUITE}-mpi-{packages}", log, MPI_PACKAGES)
    old = podman.image_id(MPI_BASE_IMAGE)
    started = time.monotonic()
    changes = [
        f"ENV PATH={DEBIAN_PATH}",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
        f"LABEL hetflow.debian.suite={SUITE}",
        f"LABEL hetflow.debian.packages={packages}",
    ]
    podman.import_dir(rootfs, MPI_BASE_IMAGE, changes)
    _timed(log, f"{MPI_BASE_IMAGE}: imported", started)
    return old


# --- the NumPy, MPI and CuPy images --------------------------------------------------


def _copy_tree(src: Path, dst: Path) -> None:
    """Copy an app folder, readable by any user: steps run as a non-root UID."""
    for path in app_files(src):
        target = dst / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(path, target)
        target.chmod(0o755 if os.access(path, os.X_OK) else 0o644)


def _build_app_image(
    podman: ImageEngine,
    examples_dir: Path,
    force: bool,
    log: Log,
    *,
    apps: Iterable[str],
    base: str,
    image: str,
    containerfile: Callable[[str], str],
) -> str:
    """Build ``image`` on ``base`` with the example app folders ``apps`` if the apps, the
    base or the Containerfile changed; returns the replaced image id ("" if none)."""
    roots = {src: examples_dir / src for src in apps}
    missing = [str(path) for path in roots.values() if not path.is_dir()]
    if missing:
        raise EngineError(f"{', '.join(missing)} not found: pass the examples/ folder of a hetflow checkout")
    digest = content_hash(roots, salt=podman.image_id(base) + containerfile(""))
    if not force and podman.label(image, HASH_LABEL) == digest:
        log(f"{image}: up to date")
        return ""
    old = podman.image_id(image)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hetflow-app-image-") as tmp:
        context = Path(tmp)
        for src, root in roots.items():
            _copy_tree(root, context / Path(src).parent.name)
        (context / "Containerfile").write_text(containerfile(digest))
        podman.build(context / "Containerfile", context, image)
    _timed(log, f"{image}: built", started)
    return old


def _build_numpy(podman: ImageEngine, examples_dir: Path, force: bool, log: Log) -> str:
    """The NumPy image of the CPU examples."""
    return _build_app_image(
        podman,
        examples_dir,
        force,
        log,
        apps=APPS,
        base=BASE_IMAGE,
        image=NUMPY_IMAGE,
        containerfile=numpy_containerfile,
    )


def _build_mpi(podman: ImageEngine, examples_dir: Path, force: bool, log: Log) -> str:
    """The MPI image of ``launcher: mpi`` gangs (examples/gang/app on the MPI base)."""
    return _build_app_image(
        podman,
        examples_dir,
        force,
        log,
        apps=MPI_APPS,
        base=MPI_BASE_IMAGE,
        image=MPI_IMAGE,
        containerfile=mpi_containerfile,
    )


# Wheels for the image's Python, whatever the host's: CPython 3.11 on manylinux x86_64.
# --no-deps: numpy is Debian's; a pip numpy in /usr/local would shadow it.
_PIP_FLAGS = (
    "--quiet", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
    "--python-version=3.11", "--implementation=cp", "--platform=manylinux2014_x86_64",
)  # fmt: skip


def _pip_wheels(cache: Path, stack: CudaStack, log: Log) -> Path:
    """Install the CuPy wheels for the image's Python (3.11, manylinux x86_64) into a
    cached folder, once; it becomes the build context of the CuPy image."""
    site = cache / f"cupy-{stack.cupy}-cuda{stack.cuda}"
    done = site.with_name(site.name + ".ok")
    if done.is_file() and site.is_dir():
        log(f"wheels: reusing {site}")
        return site
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    started = time.monotonic()
    log(f"wheels: pip install {' '.join(stack.wheels)} into {partial}")
    # The .pyc files pip writes are only of use when this Python is a 3.11 too.
    compile_flag = "--compile" if sys.version_info[:2] == (3, 11) else "--no-compile"
    _run(
        [sys.executable, "-m", "pip", "install", *_PIP_FLAGS, "--target", str(partial), compile_flag, *stack.wheels],
        what="downloading CuPy and the CUDA libraries from PyPI",
        hint="Check that PyPI is reachable and pip works (`python3 -m pip --version`; "
        "install it with `apt-get install -y python3-pip`), or build without the GPU "
        "image: build_examples(..., gpu=False).",
        timeout=1800,
    )
    shutil.rmtree(partial / "bin", ignore_errors=True)
    for unused in (partial / "nvidia/cufft/lib").glob("libcufftw*"):  # the FFTW-style API
        unused.unlink()
    partial.rename(site)
    done.write_text("\n".join(stack.wheels) + "\n")
    _timed(log, f"wheels: {site} ready", started)
    return site


# Proves the image is complete without a GPU: CuPy imports, NVRTC compiles a kernel
# that needs the runtime headers (cuda_fp16.h), and cuFFT loads.
_CUPY_SMOKE = """
import cupy
from cupy import _environment as env
from cupy.cuda import cufft
from cupy_backends.cuda.libs import nvrtc
incs = ["-I" + d for d in env._get_include_dir_from_conda_or_wheel(*nvrtc.getVersion())]
src = '#include <cuda_fp16.h>\\nextern "C" __global__ void k(float* x)' \
      '{ x[0] = __half2float(__float2half(x[0])); }'
prog = nvrtc.createProgram(src, "k.cu", [], [])
nvrtc.compileProgram(prog, ["-arch=sm_70", *incs])
print("cupy", cupy.__version__, "nvrtc", nvrtc.getVersion(), "cufft", cufft.getVersion(),
      "cubin bytes", len(nvrtc.getCUBIN(prog)))
"""


def _build_cupy(podman: ImageEngine, cache: Path, force: bool, log: Log) -> str:
    """Build the CuPy image if the NumPy image or the pins changed; returns the
    replaced image id."""
    stack = CUDA_STACK
    salt = podman.image_id(NUMPY_IMAGE) + cupy_containerfile("") + "\n".join(stack.wheels)
    digest = hashlib.sha256(salt.encode()).hexdigest()
    if not force and podman.label(CUPY_IMAGE, HASH_LABEL) == digest:
        log(f"{CUPY_IMAGE}: up to date")
        return ""
    site = _pip_wheels(cache, stack, log)
    old = podman.image_id(CUPY_IMAGE)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hetflow-cupy-") as tmp:
        containerfile = Path(tmp) / "Containerfile"
        containerfile.write_text(cupy_containerfile(digest))
        podman.build(containerfile, site, CUPY_IMAGE)
    _timed(log, f"{CUPY_IMAGE}: built", started)
    locked = ("--rm", "--network=none", "--read-only", "--tmpfs=/tmp", "--user=1000:1000", "--cap-drop=all")
    out = podman.run(
        "run", *locked, "--env=HOME=/tmp", CUPY_IMAGE, "python3", "-c", _CUPY_SMOKE, what=f"checking {CUPY_IMAGE}"
    )
    log(f"{CUPY_IMAGE}: check passed: {out.strip()}")
    return old


def build_examples(
    examples_dir: Path, *, force: bool = False, gpu: bool = True, mpi: bool = True, log: Log = print
) -> list[str]:
    """Build (or find up to date) the examples' images; returns their names.

    ``force`` rebuilds every image, but from the cached Debian rootfs and wheels under
    ``hetflow_home()/cache`` (delete those folders to fetch afresh).  ``gpu=False``
    skips the CuPy image (it needs about 600 MB of wheels from PyPI); ``mpi=False``
    skips the MPI image of ``launcher: mpi`` gangs (Open MPI, mpi4py, sshd).
    Raises EngineError when a tool, the mirror or PyPI fails."""
    podman = _Podman.default()
    cache = hetflow_home() / "cache"
    started = time.monotonic()
    stale = [_build_base(podman, cache, force, log)]
    stale.insert(0, _build_numpy(podman, Path(examples_dir), force, log))
    names = [BASE_IMAGE, NUMPY_IMAGE]
    if mpi:
        stale.insert(0, _build_mpi_base(podman, cache, force, log))
        stale.insert(0, _build_mpi(podman, Path(examples_dir), force, log))
        names.append(MPI_IMAGE)
    if gpu:
        stale.insert(0, _build_cupy(podman, cache, force, log))
        names.append(CUPY_IMAGE)
    for image_id in filter(None, stale):  # children first, so parents become free
        podman.drop(image_id)
    _timed(log, f"examples: {len(names)} images ready", started)
    return names


def build_mpi_image(examples_dir: Path, *, force: bool = False, log: Log = print) -> str:
    """Only the MPI image (and its base): what the MPI integration tests need."""
    podman = _Podman.default()
    stale = [_build_mpi_base(podman, hetflow_home() / "cache", force, log)]
    stale.insert(0, _build_mpi(podman, Path(examples_dir), force, log))
    for image_id in filter(None, stale):
        podman.drop(image_id)
    return MPI_IMAGE


# --- the busybox test image ----------------------------------------------------------


def _static_busybox() -> Path:
    """A statically linked busybox (it must run in an image with no libc); installs
    busybox-static with apt when it is missing and we may."""
    for attempt in range(2):
        for candidate in (Path("/bin/busybox"), Path("/usr/bin/busybox")):
            if candidate.is_file():
                with candidate.open("rb") as f:
                    if is_static_elf(f.read(4096)):
                        return candidate
        if attempt == 0 and os.geteuid() == 0 and shutil.which("apt-get"):
            _run(
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
    podman = _Podman.default()
    wanted = changes[-1].partition("=")[2]  # the label value that records the env
    if not force and podman.label(name, HASH_LABEL) == wanted:
        return name
    busybox = _static_busybox()
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
    libc = _run([gcc, "-print-file-name=libc.a"], what="looking for libc.a", hint=_GCC_HINT, timeout=60).strip()
    if not os.path.isabs(libc) or not os.path.isfile(libc):
        raise EngineError(
            "building the hwmatch example images needs the static C library (libc.a), which gcc "
            "cannot find: `apt-get install -y libc6-dev`"
        )
    version = _run([gcc, "--version"], what="asking gcc for its version", hint=_GCC_HINT, timeout=60)
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
    podman = _Podman.default()
    gcc, gcc_version = _gcc_for_static()
    busybox = _static_busybox()
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
            _run(
                cmd,
                what=f"compiling {source.name} for the {build.tag} build",
                hint=f"{_GCC_HINT} -march={build.march} needs gcc 11 or newer ({gcc_version}).",
                timeout=300,
            )
            with binary.open("rb") as f:
                if not is_static_elf(f.read(4096)):
                    raise EngineError(f"`{_show(cmd)}` made a dynamically linked binary; the image has no libc")
            root = Path(tmp) / f"root-{build.tag}"
            root.mkdir()
            _hwmatch_root(root, busybox, binary)
            replaced = podman.image_id(build.image)
            podman.import_dir(root, build.image, hwmatch_import_changes(build, digest))
            if replaced and replaced != podman.image_id(build.image):
                podman.drop(replaced)
            log(f"{build.image}: built with `{' '.join(hwmatch_gcc_args(build, source.name, 'whichbuild'))}`")
    _timed(log, f"hwmatch: {len(names)} images ready", started)
    return names


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m demo.images [--dir examples] [--force] [--no-gpu] [--no-mpi]``: what ``make images`` runs."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m demo.images", description="Build the example images, with no registry (cached)."
    )
    parser.add_argument("--dir", type=Path, default=Path("examples"), help="the examples directory")
    parser.add_argument("--force", action="store_true", help="rebuild even when the images exist")
    parser.add_argument("--no-gpu", dest="gpu", action="store_false", help="skip the CuPy (GPU) image")
    parser.add_argument("--no-mpi", dest="mpi", action="store_false", help="skip the MPI (gang) image")
    args = parser.parse_args(argv)
    try:
        built = build_examples(
            args.dir, force=args.force, gpu=args.gpu, mpi=args.mpi, log=lambda m: print(m, file=sys.stderr, flush=True)
        )
    except HetflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    for image in built:
        print(image)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
