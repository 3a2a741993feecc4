"""The images' names and recipes, pure (unit-tested): Containerfiles, ``podman import``
changes, content hashes, apt sources and the ELF check of a static binary."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

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
