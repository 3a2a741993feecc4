"""What a step's container gets: hardening, its user, its GPUs and nothing else."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hetflow.execute.data.paths import RunPaths
from hetflow.execute.devices.gpu import DRIVER_DIR, GpuAccess, cdi_device_names, driver_mounts, gpu_access
from hetflow.execute.engine import ContainerSpec, Mount, run_args
from hetflow.execute.run.launch.container import build_spec, container_env
from hetflow.inventory.models import Gpu
from tests.unit.builders import GIB, gpu, load_steps, node

CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm")

POOL = load_steps(
    """
    pool:
      env: {NVIDIA_VISIBLE_DEVICES: all, LD_PRELOAD: /tmp/evil.so, HOME: /root, MODE: fast}
      inputs: {m: gen/data/m.npy}
      variants:
        gpu:
          image: pool:cuda
          command: [pool, --device, cuda]
          resources: {cpus: 2, memory: 4Gi, gpus: 2}
          env: {CUDA_VISIBLE_DEVICES: "0,1,2,3", MODE: cuda}
    gen:
      image: gen
      outputs: [data/m.npy]
    """
).workflow


def pool_spec(tmp_path: Path, gpus: tuple[Gpu, ...], network: bool = False) -> ContainerSpec:
    step = POOL.steps["pool"]
    if network:
        step = step.model_copy(update={"network": True})
    return build_spec(
        run_id="r1",
        step_name="pool",
        step=step,
        variant=step.resolved_variants()["gpu"],
        attempt=2,
        uid=1000,
        gid=100,
        paths=RunPaths(tmp_path),
        access=gpu_access(gpus, node(gpus=gpus, control_devices=CONTROL)),
    )


def test_build_spec_with_two_fake_gpus(tmp_path: Path) -> None:
    g2, g5 = gpu(2, minor=2), gpu(5, minor=5)

    spec = pool_spec(tmp_path, (g2, g5))

    assert spec == ContainerSpec(
        name="hf-r1-pool-2",
        image="pool:cuda",
        command=("pool", "--device", "cuda"),
        user="1000:100",
        labels={"hetflow.run": "r1", "hetflow.step": "pool", "hetflow.attempt": "2"},
        env={
            "MODE": "cuda",
            "HOME": "/tmp",
            "NVIDIA_VISIBLE_DEVICES": "0,1",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "HETFLOW_GPU_UUIDS": f"{g2.uuid},{g5.uuid}",
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
            "HETFLOW_RUN_ID": "r1",
            "HETFLOW_STEP": "pool",
            "HETFLOW_ATTEMPT": "2",
        },
        mounts=(
            Mount(str(tmp_path / "attempts" / "pool" / "2" / "out"), "/out", read_only=False),
            Mount(str(tmp_path / "steps" / "gen" / "out" / "data" / "m.npy"), "/in/m/m.npy", read_only=True),
        ),
        devices=(
            ("/dev/nvidia2", "/dev/nvidia2"),
            ("/dev/nvidia5", "/dev/nvidia5"),
            ("/dev/nvidiactl", "/dev/nvidiactl"),
            ("/dev/nvidia-uvm", "/dev/nvidia-uvm"),
        ),
        cpus=2.0,
        memory=4 * GIB,
        network=False,
        log_path=str(tmp_path / "logs" / "pool.2.log"),
    )


def test_without_gpus_the_container_sees_void_and_no_devices(tmp_path: Path) -> None:
    spec = pool_spec(tmp_path, ())

    assert spec.env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "CUDA_VISIBLE_DEVICES" not in spec.env
    assert "LD_PRELOAD" not in spec.env
    assert (spec.devices, spec.cdi_devices) == ((), ())


ENVS = [
    pytest.param({"A": "1"}, {}, {"A": "1", "HOME": "/tmp"}, id="plain"),
    pytest.param({"HOME": "/root"}, {}, {"HOME": "/tmp"}, id="home-is-the-tmpfs"),
    pytest.param({"LD_PRELOAD": "x.so", "HETFLOW_GPU_UUIDS": "GPU-all"}, {}, {"HOME": "/tmp"}, id="reserved-dropped"),
    pytest.param(
        {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0,1,2,3"},
        {"NVIDIA_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"},
        {"HOME": "/tmp", "NVIDIA_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"},
        id="gpu-env-wins",
    ),
    pytest.param(
        {"PATH": "/evil"},
        {"PATH": "/usr/local/nvidia/bin"},
        {"HOME": "/tmp", "PATH": "/usr/local/nvidia/bin"},
        id="hetflow-path-wins",
    ),
]


@pytest.mark.parametrize(("user", "ours", "expected"), ENVS)
def test_container_env(user: dict[str, str], ours: dict[str, str], expected: dict[str, str]) -> None:
    assert container_env(user, ours) == expected


# --- engine arguments --------------------------------------------------------------------


def adjacent(args: list[str], *seq: str) -> bool:
    return any(args[i : i + len(seq)] == list(seq) for i in range(len(args)))


HARDENING = [
    pytest.param(("--cap-drop=all",), id="no-capabilities"),
    pytest.param(("--security-opt", "no-new-privileges"), id="no-new-privileges"),
    pytest.param(("--read-only",), id="read-only-root"),
    pytest.param(("--tmpfs", "/tmp:rw,nosuid,nodev,size=256m,mode=1777"), id="tmpfs-tmp"),
    pytest.param(("--network", "none"), id="no-network"),
    pytest.param(("--pull", "never"), id="never-pull"),
    pytest.param(("--user", "1000:100"), id="submitters-user"),
    pytest.param(("--name", "hf-r1-pool-2"), id="deterministic-name"),
    pytest.param(("--cpus", "2", "--memory", str(4 * GIB)), id="limits"),
    pytest.param(("--device", "/dev/nvidia2:/dev/nvidia2"), id="gpu-device"),
    pytest.param(("--label", "hetflow.run=r1"), id="run-label"),
    pytest.param(("--env", "NVIDIA_VISIBLE_DEVICES=0"), id="visible-devices"),
]


@pytest.mark.parametrize("seq", HARDENING)
def test_run_args_harden_the_container(tmp_path: Path, seq: tuple[str, ...]) -> None:
    args = run_args(pool_spec(tmp_path, (gpu(2),)))

    assert args[:2] == ["run", "-d"]
    assert adjacent(args, *seq), args


def test_run_args_end_with_image_and_command_and_mount_modes(tmp_path: Path) -> None:
    args = run_args(pool_spec(tmp_path, ()))

    assert args[-4:] == ["pool:cuda", "pool", "--device", "cuda"]
    assert adjacent(args, "-v", f"{tmp_path}/attempts/pool/2/out:/out:rw")
    assert adjacent(args, "-v", f"{tmp_path}/steps/gen/out/data/m.npy:/in/m/m.npy:ro")
    assert adjacent(args, "--log-driver", "k8s-file", "--log-opt", f"path={tmp_path}/logs/pool.2.log")
    assert "--privileged" not in args
    assert "--device" not in args[:-4]  # (the command itself has a --device)


def test_network_true_gives_the_bridge(tmp_path: Path) -> None:
    args = run_args(pool_spec(tmp_path, (), network=True))

    assert adjacent(args, "--network", "bridge")
    assert not adjacent(args, "--network", "none")


def test_cdi_devices_are_passed_by_name() -> None:
    spec = ContainerSpec("c", "img", (), "1:1", {}, {}, cdi_devices=("nvidia.com/gpu=GPU-a",))

    assert adjacent(run_args(spec), "--device", "nvidia.com/gpu=GPU-a")


# --- CDI, or device nodes and driver mounts ----------------------------------------------

REAL_A = gpu(0, fake=False, uuid="GPU-aaaa")
REAL_B = gpu(1, fake=False, uuid="GPU-bbbb")


def write_cdi(d: Path, names: list[str], *, kind: str = "nvidia.com/gpu", name: str = "nvidia.yaml") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    doc = {"cdiVersion": "0.5.0", "kind": kind, "devices": [{"name": n} for n in names]}
    text = json.dumps(doc) if name.endswith(".json") else "# nvidia-ctk cdi generate\n" + yaml.safe_dump(doc)
    (d / name).write_text(text)
    return d


CDI = [
    pytest.param(["0", "GPU-aaaa", "all"], (REAL_A,), ("nvidia.com/gpu=GPU-aaaa",), id="by-uuid"),
    pytest.param(["0", "1", "all"], (REAL_A, REAL_B), ("nvidia.com/gpu=0", "nvidia.com/gpu=1"), id="by-index"),
    pytest.param(["GPU-aaaa"], (REAL_A, REAL_B), (), id="one-gpu-unnamed-falls-back"),
    pytest.param([], (REAL_A,), (), id="no-devices-falls-back"),
]


@pytest.mark.parametrize(("names", "gpus", "cdi"), CDI)
def test_cdi_is_chosen_when_a_spec_names_every_gpu(
    tmp_path: Path, names: list[str], gpus: tuple[Gpu, ...], cdi: tuple[str, ...]
) -> None:
    d = write_cdi(tmp_path / "cdi", names)

    access = gpu_access(gpus, node(gpus=gpus, control_devices=CONTROL), cdi_dirs=[d], ldconfig="")

    assert access.cdi_devices == cdi
    if cdi:
        assert (access.devices, access.mounts) == ((), ())
    else:
        assert [inside for _, inside in access.devices] == [
            *(f"/dev/nvidia{g.minor}" for g in gpus),
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
        ]
    assert access.env["CUDA_VISIBLE_DEVICES"] == ",".join(str(i) for i in range(len(gpus)))


def test_cdi_device_names_read_only_nvidia_specs(tmp_path: Path) -> None:
    write_cdi(tmp_path / "etc", ["0", "GPU-aaaa"])
    write_cdi(tmp_path / "etc", ["gpu0"], kind="amd.com/gpu", name="amd.yaml")
    write_cdi(tmp_path / "run", ["1"], name="nvidia.json")
    (tmp_path / "run" / "broken.yaml").write_text("kind: [unclosed\n")
    (tmp_path / "run" / "notes.txt").write_text("kind: nvidia.com/gpu\ndevices: [{name: 9}]\n")

    assert cdi_device_names([tmp_path / "etc", tmp_path / "run", tmp_path / "missing"]) == {"0", "1", "GPU-aaaa"}


def test_fake_gpus_never_use_cdi(tmp_path: Path) -> None:
    d = write_cdi(tmp_path / "cdi", ["0", "GPU-00000000-test"])
    g = gpu(0)

    access = gpu_access([g], node(gpus=(g,)), cdi_dirs=[d], ldconfig="")

    assert access == GpuAccess(
        devices=(("/dev/nvidia0", "/dev/nvidia0"),),
        env={
            "NVIDIA_VISIBLE_DEVICES": "0",
            "CUDA_VISIBLE_DEVICES": "0",
            "HETFLOW_GPU_UUIDS": g.uuid,
            "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
        },
    )


def ldconfig_sample(lib: Path) -> str:
    """`ldconfig -p` as a Debian host with driver 550 prints it, pointing into ``lib``."""
    lib.mkdir(parents=True)
    (lib / "libcuda.so.550.54.15").write_bytes(b"\x7fELF")
    (lib / "libcuda.so.1").symlink_to("libcuda.so.550.54.15")
    (lib / "libnvidia-ml.so.550.54.15").write_bytes(b"\x7fELF")
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.54.15")
    return (
        "1234 libs found in cache `/etc/ld.so.cache'\n"
        f"\tlibnvidia-ml.so.1 (libc6,x86-64) => {lib}/libnvidia-ml.so.1\n"
        f"\tlibcudart.so.12 (libc6,x86-64) => {lib}/libcudart.so.12\n"
        f"\tlibcuda.so.1 (libc6,x86-64) => {lib}/libcuda.so.1\n"
        "\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1\n"
        "\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6\n"
        "Cache generated by: ldconfig (GNU libc) stable release version 2.36\n"
    )


def lib_mounts(mounts: tuple[Mount, ...] | list[Mount]) -> list[Mount]:
    # Tools (nvidia-smi) are looked up on this host's /usr/bin; only libraries are ours.
    return [m for m in mounts if m.target.startswith(f"{DRIVER_DIR}/lib64/")]


def test_driver_mounts_are_the_64_bit_driver_libraries_resolved(tmp_path: Path) -> None:
    lib = tmp_path / "lib"

    mounts = driver_mounts(ldconfig_sample(lib))

    assert lib_mounts(mounts) == [
        Mount(str(lib / "libnvidia-ml.so.550.54.15"), "/usr/local/nvidia/lib64/libnvidia-ml.so.1"),
        Mount(str(lib / "libcuda.so.550.54.15"), "/usr/local/nvidia/lib64/libcuda.so.1"),
    ]
    assert all(m.read_only for m in mounts)


def test_without_cdi_real_gpus_get_device_nodes_and_the_driver(tmp_path: Path) -> None:
    access = gpu_access(
        [REAL_B],
        node(gpus=(REAL_A, REAL_B), control_devices=CONTROL),
        cdi_dirs=[tmp_path / "no-cdi"],
        ldconfig=ldconfig_sample(tmp_path / "lib"),
    )

    assert access.devices == (
        ("/dev/nvidia1", "/dev/nvidia1"),
        ("/dev/nvidiactl", "/dev/nvidiactl"),
        ("/dev/nvidia-uvm", "/dev/nvidia-uvm"),
    )
    assert [m.target for m in lib_mounts(access.mounts)] == [
        "/usr/local/nvidia/lib64/libnvidia-ml.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
    ]
    assert access.env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert access.env["PATH"].startswith("/usr/local/nvidia/bin:")
    assert access.env["CUDA_VISIBLE_DEVICES"] == "0"  # host GPU 1 is CUDA device 0 inside


def test_a_bind_at_tmp_replaces_the_tmpfs(tmp_path: Path) -> None:
    # a TES task whose workdir is /tmp binds its own folder there; podman refuses two mounts at /tmp
    spec = pool_spec(tmp_path, ())
    own = run_args(replace(spec, mounts=(Mount(str(tmp_path), "/tmp", read_only=False),)))

    assert adjacent(own, "-v", f"{tmp_path}:/tmp:rw")
    assert not any(a.startswith("/tmp:") for a in own)
    assert adjacent(run_args(spec), "--tmpfs", "/tmp:rw,nosuid,nodev,size=256m,mode=1777")
