"""The examples' images and workflows, without podman: Containerfiles, content hashes,
apt sources, the rebuild decisions (against a fake engine), busybox image settings,
error messages, and the shape of the two example workflows."""

from __future__ import annotations

import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from demo.images import engine, examples, recipes
from demo.images.recipes import (
    APPS,
    BASE_IMAGE,
    CUDA_STACK,
    CUPY_IMAGE,
    HASH_LABEL,
    NUMPY_IMAGE,
    SITE_PACKAGES,
    content_hash,
    cupy_containerfile,
    is_static_elf,
    mirror_from_sources,
    numpy_containerfile,
    tiny_import_changes,
)

from hetflow.errors import EngineError
from hetflow.spec import load_workflow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CPU_IMAGE = "localhost/hetflow-examples/numpy:latest"
GPU_IMAGE = "localhost/hetflow-examples/cupy:latest"


# --- a fake engine -------------------------------------------------------------------


@dataclass
class FakeEngine:
    """Images as {name: labels (with "id")}; records builds and removals."""

    images: dict[str, dict[str, str]] = field(default_factory=dict)
    builds: list[tuple[str, str, list[str]]] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def exists(self, name: str) -> bool:
        return name in self.images

    def image_id(self, name: str) -> str:
        return self.images.get(name, {}).get("id", "")

    def label(self, name: str, key: str) -> str:
        return self.images.get(name, {}).get(key, "")

    def build(self, containerfile: Path, context: Path, name: str) -> None:
        text = containerfile.read_text()
        found = re.search(rf'{re.escape(HASH_LABEL)}="(\w+)"', text)
        assert found, text
        files = sorted(p.relative_to(context).as_posix() for p in context.rglob("*") if p.is_file())
        self.builds.append((name, text, files))
        self.images[name] = {"id": f"sha256:{len(self.builds)}", HASH_LABEL: found[1]}

    def import_dir(self, root: Path, name: str, changes: Sequence[str]) -> None:
        raise AssertionError("not expected in these tests")

    def drop(self, image_id: str) -> None:
        self.dropped.append(image_id)

    def run(self, *args: str, what: str, stdin: int | None = None) -> str:
        return ""


def app_tree(root: Path) -> Path:
    """A minimal examples/ folder: one script per example app."""
    for src in APPS:
        (root / src).mkdir(parents=True)
        (root / src / "main.py").write_text(f"print('{src}')\n")
    return root


def quiet(_: str) -> None:
    pass


# --- the NumPy image: what goes in, and when it is rebuilt ---------------------------


def test_numpy_image_holds_both_apps_and_is_rebuilt_only_when_a_file_changes(tmp_path: Path) -> None:
    tree = app_tree(tmp_path / "examples")
    (tree / "meanpool/app/__pycache__").mkdir()
    (tree / "meanpool/app/__pycache__/main.cpython-311.pyc").write_bytes(b"\0")
    engine = FakeEngine(images={BASE_IMAGE: {"id": "sha256:base"}})

    assert examples._build_numpy(engine, tree, False, quiet) == ""
    name, containerfile, files = engine.builds[0]
    assert name == NUMPY_IMAGE
    assert files == ["Containerfile", "circuit/main.py", "meanpool/main.py"]  # no caches
    assert f"FROM {BASE_IMAGE}\n" in containerfile
    assert "COPY meanpool /app/meanpool\n" in containerfile and "COPY circuit /app/circuit\n" in containerfile

    examples._build_numpy(engine, tree, False, quiet)
    assert len(engine.builds) == 1, "an unchanged tree must not be rebuilt"

    (tree / "circuit/app/main.py").write_text("print('changed')\n")
    assert examples._build_numpy(engine, tree, False, quiet) == "sha256:1"  # the image it replaced
    assert len(engine.builds) == 2

    examples._build_numpy(engine, tree, True, quiet)
    assert len(engine.builds) == 3, "force rebuilds"


def test_numpy_image_is_rebuilt_when_the_base_image_changes(tmp_path: Path) -> None:
    tree = app_tree(tmp_path / "examples")
    engine = FakeEngine(images={BASE_IMAGE: {"id": "sha256:base-1"}})
    examples._build_numpy(engine, tree, False, quiet)
    engine.images[BASE_IMAGE]["id"] = "sha256:base-2"
    examples._build_numpy(engine, tree, False, quiet)
    assert len(engine.builds) == 2


def test_cupy_image_is_rebuilt_when_the_numpy_image_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(examples, "_pip_wheels", lambda cache, stack, log: site)
    engine = FakeEngine(images={NUMPY_IMAGE: {"id": "sha256:numpy-1"}})
    examples._build_cupy(engine, tmp_path, False, quiet)
    examples._build_cupy(engine, tmp_path, False, quiet)
    assert [b[0] for b in engine.builds] == [CUPY_IMAGE]
    engine.images[NUMPY_IMAGE]["id"] = "sha256:numpy-2"
    examples._build_cupy(engine, tmp_path, False, quiet)
    assert [b[0] for b in engine.builds] == [CUPY_IMAGE, CUPY_IMAGE]


def test_missing_app_folder_is_a_clear_engine_error(tmp_path: Path) -> None:
    (tmp_path / "circuit/app").mkdir(parents=True)
    engine = FakeEngine(images={BASE_IMAGE: {"id": "sha256:base"}})
    with pytest.raises(EngineError) as err:
        examples._build_numpy(engine, tmp_path, False, quiet)
    assert str(err.value) == f"{tmp_path}/meanpool/app not found: pass the examples/ folder of a hetflow checkout"
    assert engine.builds == []


# --- content hash ----------------------------------------------------------------------


def _edit_content(root: Path) -> None:
    (root / "meanpool/app/main.py").write_text("print('other')\n")


def _add_file(root: Path) -> None:
    (root / "circuit/app/extra.py").write_text("")


def _rename_file(root: Path) -> None:
    (root / "circuit/app/main.py").rename(root / "circuit/app/renamed.py")


def _move_between_apps(root: Path) -> None:
    (root / "circuit/app/main.py").unlink()
    (root / "meanpool/app/circuit_main.py").write_text("print('circuit/app')\n")


def _add_cache(root: Path) -> None:
    (root / "circuit/app/__pycache__").mkdir()
    (root / "circuit/app/__pycache__/main.cpython-311.pyc").write_bytes(b"x")
    (root / "circuit/app/.swp").write_text("x")
    (root / "meanpool/app/stray.pyc").write_bytes(b"x")


@pytest.mark.parametrize(
    ("edit", "changes"),
    [
        pytest.param(_edit_content, True, id="content"),
        pytest.param(_add_file, True, id="new-file"),
        pytest.param(_rename_file, True, id="rename"),
        pytest.param(_move_between_apps, True, id="move-between-apps"),
        pytest.param(_add_cache, False, id="caches-and-hidden-ignored"),
    ],
)
def test_content_hash(tmp_path: Path, edit: object, changes: bool) -> None:
    tree = app_tree(tmp_path)
    roots = {src: tree / src for src in APPS}
    before = content_hash(roots, salt="base")
    assert content_hash(roots, salt="base") == before, "the hash must be deterministic"
    edit(tree)  # type: ignore[operator]
    assert (content_hash(roots, salt="base") != before) is changes


def test_content_hash_covers_the_salt(tmp_path: Path) -> None:
    tree = app_tree(tmp_path)
    roots = {src: tree / src for src in APPS}
    assert content_hash(roots, salt="base-1") != content_hash(roots, salt="base-2")


# --- Containerfiles and the CUDA pins ----------------------------------------------------


def test_numpy_containerfile_copies_only_and_labels_the_hash() -> None:
    text = numpy_containerfile("abc123")
    lines = text.splitlines()
    assert lines[0] == f"FROM {BASE_IMAGE}"
    assert f'LABEL {HASH_LABEL}="abc123"' in lines
    assert not any(line.startswith("RUN") for line in lines), "RUN needs a working runtime in the build"


def test_mpi_containerfile_copies_the_gang_apps_onto_the_debootstrapped_mpi_base() -> None:
    text = recipes.mpi_containerfile("abc123")
    lines = text.splitlines()
    assert lines[0] == f"FROM {recipes.MPI_BASE_IMAGE}"
    assert f'LABEL {HASH_LABEL}="abc123"' in lines and "COPY gang /app/gang" in lines
    assert not any(line.startswith("RUN") for line in lines), "RUN needs a working runtime in the build"
    # every package comes from debootstrap --include: the build itself needs no network
    assert {"openmpi-bin", "python3-mpi4py", "python3-numpy", "openssh-server", "openssh-client"} <= set(
        recipes.MPI_PACKAGES
    )
    assert recipes.MPI_APPS == {"gang/app": "/app/gang"}
    app = Path(__file__).resolve().parents[2] / "examples/gang/app"
    assert {p.name for p in app.iterdir() if p.suffix == ".py"} >= {"allreduce.py", "torch_allreduce.py"}


def test_cupy_containerfile_puts_wheels_on_python_path_and_libraries_on_loader_path() -> None:
    text = cupy_containerfile("abc123")
    assert text.startswith(f"FROM {NUMPY_IMAGE}\n")
    assert f"COPY . {SITE_PACKAGES}/\n" in text
    env = re.search(r"^ENV LD_LIBRARY_PATH=(\S+)", text, re.M)
    assert env, text
    assert env[1].split(":") == [f"{SITE_PACKAGES}/nvidia/{d}/lib" for d in ("cuda_runtime", "cuda_nvrtc", "cufft")]
    assert f'hetflow.cuda="{CUDA_STACK.cuda}"' in text and f'{HASH_LABEL}="abc123"' in text
    assert "CUPY_CACHE_DIR=/tmp/" in text, "the root fs is read-only; the kernel cache must be on /tmp"


def test_cuda_pins_agree_with_each_other() -> None:
    pins = dict(pin.split("==") for pin in CUDA_STACK.wheels)
    # CuPy uses the runtime headers only when their major.minor equals NVRTC's.
    for wheel in ("nvidia-cuda-runtime-cu12", "nvidia-cuda-nvrtc-cu12"):
        assert pins[wheel].startswith(CUDA_STACK.cuda + "."), wheel
    assert pins["cupy-cuda12x"] == CUDA_STACK.cupy
    assert "numpy" not in pins, "a pip numpy in /usr/local would shadow Debian's"
    for lib_dir in CUDA_STACK.lib_dirs:
        assert f"nvidia-{lib_dir.replace('_', '-')}-cu12" in pins, lib_dir


# --- apt sources -------------------------------------------------------------------------

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


@pytest.mark.parametrize(
    ("deb822", "one_line", "want"),
    [
        pytest.param([DEB822], [], "http://mirror.example/debian", id="deb822"),
        pytest.param(
            [DEB822.replace("Suites: bookworm bookworm-updates", "Suites: bookworm-updates")],
            [],
            None,
            id="security-and-updates-are-not-the-suite",
        ),
        pytest.param(
            ["Enabled: no\nTypes: deb\nURIs: http://off.example/debian\nSuites: bookworm\n\n" + DEB822],
            [],
            "http://mirror.example/debian",
            id="disabled-stanza-skipped",
        ),
        pytest.param(
            ["Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\n"], [], None, id="deb-src-only"
        ),
        pytest.param(
            [],
            [
                "# deb http://old.example/debian bookworm main\n"
                "deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64] http://list.example/debian bookworm main\n"
            ],
            "http://list.example/debian",
            id="one-line-with-options",
        ),
        pytest.param([], ["deb http://list.example/debian bullseye main\n"], None, id="other-release"),
    ],
)
def test_mirror_from_sources(deb822: list[str], one_line: list[str], want: str | None) -> None:
    assert mirror_from_sources(deb822, one_line) == want


def test_debian_mirror_reads_apt_config_and_says_what_to_do_without_one(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    with pytest.raises(EngineError, match=r"no apt source for Debian bookworm .* add one"):
        examples.debian_mirror(tmp_path)
    (tmp_path / "sources.list.d/debian.sources").write_text(DEB822)
    assert examples.debian_mirror(tmp_path) == "http://mirror.example/debian"


# --- command failures ----------------------------------------------------------------------


def test_missing_tool_names_it_and_what_to_install() -> None:
    with pytest.raises(EngineError) as err:
        engine.run_tool(["hetflow-no-such-tool", "x"], what="debootstrap of the base", hint="apt-get install -y it")
    assert str(err.value) == "debootstrap of the base: hetflow-no-such-tool is not installed. apt-get install -y it"


def test_failing_command_shows_its_exit_code_output_and_hint() -> None:
    cmd = [sys.executable, "-c", "import sys; print('noise'); sys.stderr.write('E: mirror down\\n'); sys.exit(3)"]
    with pytest.raises(EngineError) as err:
        engine.run_tool(cmd, what="pip of cupy", hint="Check that PyPI is reachable.")
    message = str(err.value)
    assert message.startswith("pip of cupy: `")
    assert "exited 3:" in message and "E: mirror down" in message and message.endswith("Check that PyPI is reachable.")


# --- the busybox image ------------------------------------------------------------------


def test_tiny_image_changes_set_path_then_env_then_a_label_of_both() -> None:
    plain = tiny_import_changes()
    hostile = tiny_import_changes({"NVIDIA_VISIBLE_DEVICES": "all", "A": "x y=z"})
    assert plain[0] == "ENV PATH=/bin" and plain[-1].startswith(f"LABEL {HASH_LABEL}=")
    assert hostile[1:3] == ["ENV NVIDIA_VISIBLE_DEVICES=all", "ENV A=x y=z"]  # podman takes values raw
    assert plain[-1] != hostile[-1], "another env must give another label, so the image is rebuilt"
    assert tiny_import_changes({"A": "1"}) == tiny_import_changes({"A": "1"})


@pytest.mark.parametrize("env", [{"1BAD": "x"}, {"A-B": "x"}, {"A": "two\nlines"}], ids=["digit", "dash", "newline"])
def test_tiny_image_rejects_env_podman_would_mangle(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="environment variable"):
        tiny_import_changes(env)


def _elf(program_headers: Sequence[int], elf_class: int = 2) -> bytes:
    """A 64-bit little-endian ELF header followed by program headers of these types."""
    header = bytearray(64)
    header[:6] = b"\x7fELF" + bytes([elf_class, 1])
    struct.pack_into("<Q", header, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", header, 0x36, 56, len(program_headers))  # e_phentsize, e_phnum
    return bytes(header) + b"".join(struct.pack("<I", t) + bytes(52) for t in program_headers)


@pytest.mark.parametrize(
    ("head", "static"),
    [
        pytest.param(_elf([6, 1, 1]), True, id="static"),
        pytest.param(_elf([6, 3, 1]), False, id="has-interpreter"),
        pytest.param(_elf([1], elf_class=1), False, id="32-bit"),
        pytest.param(b"#!/bin/sh\n", False, id="script"),
        pytest.param(b"\x7fELF", False, id="just-the-magic"),
        pytest.param(_elf([1, 1, 1])[:100], False, id="truncated"),
    ],
)
def test_is_static_elf(head: bytes, static: bool) -> None:
    assert is_static_elf(head) is static


def test_this_machines_busybox_is_static_and_python_is_not() -> None:
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        pytest.skip("no /bin/busybox here (apt-get install -y busybox-static)")
    assert is_static_elf(busybox.read_bytes()[:4096])
    assert not is_static_elf(Path(sys.executable).resolve().read_bytes()[:4096])


# --- the example workflows ------------------------------------------------------------------


def _variants(example: str) -> list[tuple[str, str, dict[str, object]]]:
    """(step, variant, {image, command, gpus, inputs, outputs}) for every variant."""
    wf = load_workflow(EXAMPLES / example / "workflow.yaml").workflow
    rows = []
    for name, step in wf.steps.items():
        for vname, variant in step.resolved_variants().items():
            facts = {
                "image": variant.image,
                "command": variant.command,
                "gpus": variant.resources.gpus,
                "cpus": variant.resources.cpus,
                "inputs": step.inputs,
                "outputs": step.outputs,
            }
            rows.append((name, vname, facts))
    return rows


@pytest.mark.parametrize("example", ["meanpool", "circuit"])
def test_example_commands_match_their_declared_files_and_images(example: str) -> None:
    for step, variant, v in _variants(example):
        where = f"{example}/{step}/{variant}"
        command = list(v["command"])  # type: ignore[call-overload]
        script = command[1]
        assert command[0] == "python3" and script.startswith(f"/app/{example}/"), where
        assert (EXAMPLES / example / "app" / Path(script).name).is_file(), f"{where}: {script} is not in the app"
        reads = {a for a in command if a.startswith("/in/")}
        declared = {f"/in/{key}/{ref.split('/', 1)[1]}" for key, ref in v["inputs"].items()}  # type: ignore[attr-defined]
        assert reads == declared, f"{where} reads {reads}, declares {declared}"
        writes = {a.removeprefix("/out/") for a in command if a.startswith("/out/")}
        assert writes == set(v["outputs"]), where  # type: ignore[call-overload]
        gpu = v["gpus"] > 0  # type: ignore[operator]
        assert v["image"] == (GPU_IMAGE if gpu else CPU_IMAGE), where
        assert ("--gpu" in command) is gpu, where
        assert v["cpus"] <= 2, f"{where}: this project's machines have 2 cores"


def test_circuit_has_cpu_only_either_and_gpu_only_steps_and_nothing_needs_litho() -> None:
    wf = load_workflow(EXAMPLES / "circuit" / "workflow.yaml").workflow
    kinds = {}
    for name, step in wf.steps.items():
        kinds[name] = {("gpu" if v.resources.gpus else "cpu") for v in step.resolved_variants().values()}
    assert len(wf.steps) >= 6
    assert {"netlist", "synthesize", "route", "signoff"} <= {n for n, k in kinds.items() if k == {"cpu"}}
    assert {"place", "simulate"} <= {n for n, k in kinds.items() if k == {"cpu", "gpu"}}
    assert kinds["litho"] == {"gpu"} and wf.steps["litho"].optional
    assert not any("litho" in step.dependencies() for step in wf.steps.values())


def test_gpu_and_cpu_variants_run_the_same_computation() -> None:
    """A variant pair differs only in --gpu: the placer must not pick different work."""
    for example in ("meanpool", "circuit"):
        by_step: dict[str, dict[str, list[str]]] = {}
        for step, variant, v in _variants(example):
            by_step.setdefault(step, {})[variant] = [a for a in v["command"] if a != "--gpu"]  # type: ignore[attr-defined]
        for step, commands in by_step.items():
            if {"cpu", "gpu"} <= set(commands):
                assert commands["cpu"] == commands["gpu"], f"{example}/{step}"
