"""GPU isolation per vendor and sharing mode, checked from inside REAL podman containers.

The GPUs are FAKE: ``Gpu``/``Node`` values built by hand over device nodes made with
mknod in a tmp dir (NVIDIA 195:N, DRM 226:N for /dev/dri/renderD*/card*, any char device
for /dev/kfd and /dev/nvidia-caps), with no driver behind them.  The local runner's own
pieces decide and lease (``LocalDispatch`` over a real store: the chooser, the tenancy,
``gpu_access``), and the containers are started with hetflow's own ``run_args``.

Inside, each container lists /dev and its variables, then makes a node for every fake
device (it is given CAP_MKNOD for this probe only) and opens it: a device the runtime's
device cgroup allows fails with ENXIO or ENODEV (no driver), one it refuses with EPERM.
So "absent inside" and "refused by the device cgroup" are both shown, and the
containers of one batch wait for each other, so they provably run at the same time.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import cast

import pytest

from hetflow.config import engine_env
from hetflow.execute import ContainerSpec, GpuAccess, LocalDispatch, Mount, run_args
from hetflow.execute.backends.base import Backend
from hetflow.inventory import Gpu, GpuSharing, MigDevice, Node
from hetflow.plan import GreedyChooser
from hetflow.spec import Step
from hetflow.state import Lease, Store
from tests.integration.hfkit import BUSYBOX, Hetflow, step_out, write
from tests.unit.builders import cpu, load_steps

GIB = 1024**3
REFUSED = "Operation not permitted"
RENDER_GID, KFD_GID = 4242, 4243

# (name under the fake /dev, major, minor, mode, gid)
NODES = (
    ("nvidia0", 195, 0, 0o666, 0),
    ("nvidia1", 195, 1, 0o666, 0),
    ("nvidiactl", 195, 255, 0o666, 0),
    ("nvidia-caps/nvidia-cap21", 240, 21, 0o444, 0),
    ("nvidia-caps/nvidia-cap22", 240, 22, 0o444, 0),
    ("nvidia-caps/nvidia-cap30", 240, 30, 0o444, 0),
    ("nvidia-caps/nvidia-cap31", 240, 31, 0o444, 0),
    ("kfd", 241, 0, 0o660, KFD_GID),
    ("dri/renderD128", 226, 128, 0o660, RENDER_GID),
    ("dri/card1", 226, 1, 0o660, RENDER_GID),
    ("dri/renderD129", 226, 129, 0o660, RENDER_GID),
    ("dri/card2", 226, 2, 0o660, RENDER_GID),
    ("dri/renderD130", 226, 130, 0o660, RENDER_GID),
    ("dri/card3", 226, 3, 0o660, RENDER_GID),
)
DEVICES = " ".join(f"{major}:{minor}" for _, major, minor, _, _ in NODES)

PROBE = f"""
ls /dev /dev/dri /dev/nvidia-caps > /out/dev.txt 2>/dev/null; env > /out/env.txt
if [ -n "$CUDA_MPS_PIPE_DIRECTORY" ]; then cat "$CUDA_MPS_PIPE_DIRECTORY/control" > /out/pipe.txt; fi
for d in {DEVICES}; do
  n=/out/node; rm -f $n; mknod $n c ${{d%:*}} ${{d#*:}}
  if cat $n > /dev/null 2> /out/err; then r=opened; else r=$(sed 's/.*: //' /out/err); fi
  echo "$d $r" >> /out/open.txt; rm -f $n
done
touch /sync/$PROBE_NAME; i=0
while [ $(ls /sync | wc -l) -lt $PROBE_BATCH ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
ls /sync > /out/together.txt
"""


@pytest.fixture(autouse=True)
def _image(busybox: str) -> None:
    """The tiny image every container here runs (built once per session)."""


@pytest.fixture
def dev(tmp_path: Path) -> Path:
    root = tmp_path / "dev"
    for name, major, minor, mode, gid in NODES:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(path, 0o600 | 0o020000, os.makedev(major, minor))
        os.chown(path, 0, gid)
        path.chmod(mode)
    return root


def nvidia(dev: Path, index: int, **update: object) -> Gpu:
    return Gpu(
        index=index,
        uuid=f"GPU-fake-{index}",
        model="NVIDIA A100-SXM4-40GB",
        memory_bytes=40 * GIB,
        compute_capability="8.0",
        driver_version="fake",
        device_path=str(dev / f"nvidia{index}"),
        minor=index,
        fake=True,
    ).model_copy(update=update)


def drm(dev: Path, index: int, vendor: str, render: int) -> Gpu:
    return nvidia(dev, index).model_copy(
        update={
            "vendor": vendor,
            "model": "AMD Instinct MI250X" if vendor == "amd" else "Intel Data Center GPU Max 1550",
            "uuid": f"GPU-{vendor}-{index}",
            "compute_capability": "",
            "render_path": str(dev / f"dri/renderD{render}"),
            "card_path": str(dev / f"dri/card{render - 127}"),
            "device_path": "",
        }
    )


def host(dev: Path, gpus: tuple[Gpu, ...], sharing: GpuSharing | None = None) -> Node:
    return Node(
        name="fake-host",
        cpu=cpu(16),
        memory_bytes=64 * GIB,
        gpus=gpus,
        gpu_source="fake",
        control_devices=(str(dev / "nvidiactl"), str(dev / "kfd")),
        gpu_sharing=sharing or GpuSharing(),
    )


def step(resources: str) -> Step:
    return load_steps(f"s:\n  image: {BUSYBOX}\n  resources: {{{resources}}}\n").workflow.steps["s"]


class Host:
    """The local runner's pieces over one store, as one hetflow process has them."""

    def __init__(self, node: Node, store: Store) -> None:
        self.node = node
        self.dispatch = LocalDispatch(
            node=node,
            chooser=GreedyChooser(),
            store=store,
            backend=cast(Backend, None),  # every lease here is this process's: never polled
            active={},
            pid=os.getpid(),
            alive=lambda pid: True,
        )

    def take(self, name: str, resources: str) -> tuple[GpuAccess, str]:
        """Decide, lease and build the container's GPU access for a one-step attempt."""
        s = step(resources)
        d = self.dispatch.decide(name, s)
        assert d.variant is not None, d.why
        assert self.dispatch.reserve(Lease("", "r1", name, 1, f"hf-r1-{name}-1", os.getpid()), d.gpus, d.slot)
        return self.dispatch.access(s.resolved_variants()[d.variant], d.gpus, d.slot), d.why


def run_batch(tmp_path: Path, accesses: dict[str, GpuAccess], user: str = "0:0") -> dict[str, Path]:
    """Start one container per access at once (real podman), wait for all; their /out dirs."""
    sync = tmp_path / "sync"
    sync.mkdir(exist_ok=True)
    outs: dict[str, Path] = {}
    names = []
    for label, access in accesses.items():
        out = tmp_path / "out" / label
        out.mkdir(parents=True)
        name = f"hf-iso-{os.getpid()}-{tmp_path.name[-12:]}-{label}".lower().replace("_", "-")
        spec = ContainerSpec(
            name=name,
            image=BUSYBOX,
            command=("sh", "-c", PROBE),
            user=user,
            labels={},
            env={**access.env, "PROBE_NAME": label, "PROBE_BATCH": str(len(accesses))},
            mounts=(
                Mount(str(out), "/out", read_only=False),
                Mount(str(sync), "/sync", read_only=False),
                *access.mounts,
            ),
            devices=access.devices,
            group_add=access.groups,
            cap_add=("MKNOD",),
        )
        subprocess.run(["podman", *run_args(spec)], env=engine_env(), check=True, capture_output=True)
        names.append(name)
        outs[label] = out
    try:
        codes = subprocess.run(
            ["podman", "wait", *names], env=engine_env(), check=True, capture_output=True, text=True
        ).stdout.split()
        assert codes == ["0"] * len(names)
    finally:
        subprocess.run(["podman", "rm", "-f", *names], env=engine_env(), capture_output=True)
    return outs


def seen(out: Path) -> dict[str, bool]:
    """Each fake device (major:minor): whether the container's device cgroup lets it open."""
    return {
        line.split(" ", 1)[0]: line.split(" ", 1)[1] != REFUSED for line in (out / "open.txt").read_text().splitlines()
    }


def allowed(out: Path) -> set[str]:
    return {d for d, ok in seen(out).items() if ok}


def env_of(out: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in (out / "env.txt").read_text().splitlines() if "=" in line)


def listed(out: Path) -> set[str]:
    return set((out / "dev.txt").read_text().split())


def together(out: Path, n: int) -> bool:
    return len((out / "together.txt").read_text().split()) == n


def test_two_time_sliced_steps_share_one_gpu_a_whole_step_holds_the_other(tmp_path: Path, dev: Path) -> None:
    node = host(dev, (nvidia(dev, 0), nvidia(dev, 1)), GpuSharing(mode="time-slicing", replicas=2))
    h = Host(node, Store(tmp_path / "state.db"))
    whole, _ = h.take("whole", "gpus: 1")
    s1, why = h.take("s1", "gpu_share: 0.5")
    s2, _ = h.take("s2", "gpu_share: 0.5")
    assert "time-slicing x2" in why
    third = h.dispatch.decide("s3", step("gpu_share: 0.25"))
    assert third.variant is None and third.wait and "2 of 2 time-slicing tenants" in third.why

    outs = run_batch(tmp_path, {"whole": whole, "s1": s1, "s2": s2})

    assert all(together(o, 3) for o in outs.values())
    assert allowed(outs["whole"]) == {"195:0", "195:255"}
    for s in ("s1", "s2"):
        assert allowed(outs[s]) == {"195:1", "195:255"}, "a tenant sees only its shared GPU"
        assert {"nvidia1", "nvidiactl"} <= listed(outs[s]) and "nvidia0" not in listed(outs[s])
        env = env_of(outs[s])
        assert (env["CUDA_VISIBLE_DEVICES"], env["HETFLOW_GPU_SHARE"], env["HETFLOW_GPU_UUIDS"]) == (
            "0",
            "0.5",
            "GPU-fake-1",
        )
    assert "nvidia1" not in listed(outs["whole"])


def test_mps_clients_get_their_limits_and_only_their_gpu(
    tmp_path: Path, dev: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipe = tmp_path / "mps-pipe"
    pipe.mkdir()
    (pipe / "control").write_text("fake pipe\n")
    node = host(dev, (nvidia(dev, 0),), GpuSharing(mode="mps", replicas=4))
    h = Host(node, Store(tmp_path / "state.db"))
    monkeypatch.setenv("HETFLOW_MPS_PIPE_DIRECTORY", str(pipe))
    a, _ = h.take("a", "gpu_share: 0.75")
    b, _ = h.take("b", "gpu_share: 0.25, gpu_memory: 2Gi")
    full = h.dispatch.decide("c", step("gpu_share: 0.25"))
    assert full.variant is None and "does not fit" in full.why  # 0.75 + 0.25 = 1: no room left

    outs = run_batch(tmp_path, {"a": a, "b": b})

    ea, eb = env_of(outs["a"]), env_of(outs["b"])
    assert (ea["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], ea["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]) == ("75", "0=30720M")
    assert (eb["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], eb["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]) == ("25", "0=2048M")
    assert ea["CUDA_MPS_PIPE_DIRECTORY"] == str(pipe)
    for o in outs.values():
        assert allowed(o) == {"195:0", "195:255"}
    # the pipe directory is the host's, bound into every client (the daemon's pipes live there)
    assert [(o / "pipe.txt").read_text() for o in outs.values()] == ["fake pipe\n"] * 2


def test_mig_steps_see_only_their_instance(tmp_path: Path, dev: Path) -> None:
    caps = {0: ("nvidia-cap21", "nvidia-cap22"), 1: ("nvidia-cap30", "nvidia-cap31")}
    migs = tuple(
        MigDevice(
            index=i,
            uuid=f"MIG-fake-{i}",
            profile="3g.20gb",
            slices=3,
            memory_bytes=20 * GIB,
            cap_paths=tuple(str(dev / "nvidia-caps" / c) for c in caps[i]),
        )
        for i in (0, 1)
    )
    node = host(dev, (nvidia(dev, 0, mig=migs, mig_enabled=True),))
    h = Host(node, Store(tmp_path / "state.db"))
    m0, _ = h.take("m0", "gpu_mig: 3g.20gb")
    m1, _ = h.take("m1", "gpu_mig: 3g.20gb")
    assert h.dispatch.decide("m2", step("gpu_mig: 3g.20gb")).wait  # both instances held
    never = h.dispatch.decide("w", step("gpus: 1"))
    assert never.variant is None and not never.wait  # a GPU in MIG mode is never given whole

    outs = run_batch(tmp_path, {"m0": m0, "m1": m1})

    assert allowed(outs["m0"]) == {"195:0", "195:255", "240:21", "240:22"}
    assert allowed(outs["m1"]) == {"195:0", "195:255", "240:30", "240:31"}
    assert {"nvidia-cap21", "nvidia-cap22"} <= listed(outs["m0"]) and "nvidia-cap30" not in listed(outs["m0"])
    for i, label in enumerate(("m0", "m1")):
        env = env_of(outs[label])
        assert env["NVIDIA_VISIBLE_DEVICES"] == env["CUDA_VISIBLE_DEVICES"] == f"MIG-fake-{i}"


def test_amd_and_intel_steps_see_only_their_dri_nodes(tmp_path: Path, dev: Path) -> None:
    node = host(dev, (drm(dev, 0, "amd", 128), drm(dev, 1, "amd", 129), drm(dev, 2, "intel", 130)))
    h = Host(node, Store(tmp_path / "state.db"))
    a0, _ = h.take("a0", "gpus: 1, gpu_vendor: amd")
    a1, _ = h.take("a1", "gpus: 1, gpu_vendor: amd")
    i0, _ = h.take("i0", "gpus: 1, gpu_vendor: intel")
    assert h.dispatch.decide("a2", step("gpus: 1, gpu_vendor: amd")).wait  # both AMD GPUs held
    assert h.dispatch.decide("n", step("gpus: 1")).variant is None  # no NVIDIA GPU here at all

    outs = run_batch(tmp_path, {"a0": a0, "a1": a1, "i0": i0})

    assert all(together(o, 3) for o in outs.values())
    assert allowed(outs["a0"]) == {"241:0", "226:128", "226:1"}
    assert allowed(outs["a1"]) == {"241:0", "226:129", "226:2"}
    assert allowed(outs["i0"]) == {"226:130", "226:3"}
    assert listed(outs["a0"]) >= {"kfd", "renderD128", "card1"} and not listed(outs["a0"]) & {"renderD129", "nvidiactl"}
    assert "kfd" not in listed(outs["i0"]) and "nvidiactl" not in listed(outs["i0"])
    for label in ("a0", "a1"):
        env = env_of(outs[label])
        assert (env["ROCR_VISIBLE_DEVICES"], env["HIP_VISIBLE_DEVICES"], env["NVIDIA_VISIBLE_DEVICES"]) == (
            "0",
            "0",
            "void",
        )
    assert env_of(outs["i0"])["ZE_AFFINITY_MASK"] == "0"


def test_a_non_root_submitter_opens_its_render_node_through_the_added_group(tmp_path: Path, dev: Path) -> None:
    node = host(dev, (drm(dev, 0, "amd", 128),))
    a0, _ = Host(node, Store(tmp_path / "state.db")).take("a0", "gpus: 1, gpu_vendor: amd")
    assert set(a0.groups) == {str(RENDER_GID), str(KFD_GID)}
    probe = "cat /dev/dri/renderD128 2>&1 | sed 's/.*: //' > /out/LABEL; id -G > /out/LABEL.groups"
    out = tmp_path / "out"
    out.mkdir()
    for label, access in (("with", a0), ("without", replace(a0, groups=()))):
        spec = ContainerSpec(
            name=f"hf-iso-{os.getpid()}-{label}",
            image=BUSYBOX,
            command=("sh", "-c", probe.replace("LABEL", label)),
            user="1000:1000",
            labels={},
            env=a0.env,
            mounts=(Mount(str(out), "/out", read_only=False),),
            devices=access.devices,
            group_add=access.groups,
        )
        out.chmod(0o777)
        subprocess.run(["podman", *run_args(spec, attached=True)], env=engine_env(), check=True, capture_output=True)
        subprocess.run(["podman", "rm", "-f", spec.name], env=engine_env(), capture_output=True)
    assert (out / "with").read_text().strip() != "Permission denied"  # the group lets it reach the (absent) driver
    assert (out / "without").read_text().strip() == "Permission denied"
    assert str(RENDER_GID) in (out / "with.groups").read_text().split()
    assert str(RENDER_GID) not in (out / "without.groups").read_text().split()


def test_hetflow_run_gives_a_share_on_an_exclusive_machine_a_whole_gpu(hf: Hetflow, tmp_path: Path) -> None:
    """The real CLI end to end (fake NVIDIA GPUs of HETFLOW_FAKE_GPUS, exclusive by default):
    two share steps run at once, each on a whole GPU of its own, and say why."""
    probe = "ls /dev > /out/dev.txt; env > /out/env.txt; sleep 1"
    body = "".join(
        f"""
  {name}:
    image: {BUSYBOX}
    command: [sh, -c, "{probe}"]
    resources: {{cpus: 0.5, gpu_share: 0.5}}
    outputs: [dev.txt, env.txt]
"""
        for name in ("one", "two")
    )
    hf(
        "run",
        write(tmp_path, "apiVersion: hetflow/v1\nname: shares\nsteps:" + body),
        extra_env={"HETFLOW_FAKE_GPUS": "a100:2"},
    )
    run_id = hf.last_run()
    steps = {s["step"]: s for s in hf.show(run_id)["steps"]}
    assert steps["one"]["started"] < steps["two"]["ended"] and steps["two"]["started"] < steps["one"]["ended"]
    nodes = [{d for d in listed(step_out(hf, run_id, s)) if d[:6] == "nvidia" and d[6:].isdigit()} for s in steps]
    assert sorted(map(len, nodes)) == [1, 1] and nodes[0] != nodes[1]
    for s in steps.values():
        assert "exclusive, so the share takes a whole GPU" in s["reason"]
