"""Building the planning instance: filters with reasons, run times, edge bytes, no-fit errors."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hetflow.errors import NoFitError
from hetflow.plan.build import DEFAULT_ESTIMATE, ImageCheck, Profile, build_instance, edge_bytes, instance_notes
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Rejection
from tests.unit.builders import GIB, load_steps

STD = MachineClass("cpu.std", 8, 16, 64 * GIB, speed=1.0, price_per_hour=0.68)
FAST = MachineClass("cpu.fast", 4, 16, 64 * GIB, speed=1.4, price_per_hour=0.95)
T4 = MachineClass(
    "gpu.t4", 3, 8, 32 * GIB, gpus=1, gpu_model="Tesla T4", gpu_memory=16 * GIB, gpu_cc=(7, 5), gpu_speed=3.0 / 8.5
)
A100 = MachineClass(
    "gpu.a100",
    1,
    48,
    384 * GIB,
    speed=1.2,
    gpus=4,
    gpu_model="NVIDIA A100-SXM4-40GB",
    gpu_memory=40 * GIB,
    gpu_cc=(8, 0),
    gpu_speed=1.0,
)
HETERO16 = (STD, FAST, T4, A100)


def build(
    body: str,
    classes: tuple[MachineClass, ...] = HETERO16,
    *,
    profile: Profile | None = None,
    image_check: ImageCheck | None = None,
) -> Instance:
    wf = load_steps(body).workflow
    return build_instance(wf, classes, bandwidth=1.25e9, profile=profile, image_check=image_check)


# --- filters: each rejection reason ------------------------------------------------------


@dataclass(frozen=True)
class FilterCase:
    resources: str  # the variant's YAML after `image: img`
    on: MachineClass
    rejected: tuple[tuple[str, str], ...]  # (code, reason) on that class, in filter order


FILTERS = [
    pytest.param(FilterCase("resources: {cpus: 16}", STD, ()), id="fits-exactly"),
    pytest.param(FilterCase("resources: {cpus: 64}", STD, (("cpus", "asks for 64 CPUs; cpu.std has 16"),)), id="cpus"),
    pytest.param(
        FilterCase(
            "resources: {cpus: 1.5}", MachineClass("tiny", 1, 1, GIB), (("cpus", "asks for 1.5 CPUs; tiny has 1"),)
        ),
        id="fractional-cpus",
    ),
    pytest.param(
        FilterCase(
            "resources: {memory: 128Gi}", STD, (("memory", "asks for 128.0 GiB of memory; cpu.std has 64.0 GiB"),)
        ),
        id="memory",
    ),
    pytest.param(
        FilterCase("resources: {gpus: 1}", STD, (("gpus", "asks for 1 GPU; cpu.std has none"),)), id="no-gpus"
    ),
    pytest.param(
        FilterCase("resources: {gpus: 2}", T4, (("gpus", "asks for 2 GPUs; gpu.t4 has 1"),)), id="too-few-gpus"
    ),
    pytest.param(
        FilterCase(
            "resources: {gpus: 1}\ngpu: {min_compute_capability: 8.0}",
            T4,
            (("gpu_cc", "needs compute capability 8.0; gpu.t4 has 7.5 (Tesla T4)"),),
        ),
        id="compute-capability",
    ),
    pytest.param(
        FilterCase(
            "resources: {gpus: 1}\ngpu: {min_memory: 32Gi}",
            T4,
            (("gpu_memory", "needs 32.0 GiB of GPU memory; gpu.t4 has 16.0 GiB (Tesla T4)"),),
        ),
        id="gpu-memory",
    ),
    pytest.param(
        FilterCase(
            "resources: {gpus: 1}\ngpu: {models: [A100, H100]}",
            T4,
            (("gpu_model", "needs a GPU model among A100, H100; gpu.t4 has Tesla T4"),),
        ),
        id="gpu-model",
    ),
    pytest.param(
        FilterCase("resources: {gpus: 1}\ngpu: {models: [a100], min_compute_capability: 8.0}", A100, ()),
        id="gpu-constraints-met",
    ),
    pytest.param(
        FilterCase(
            "resources: {cpus: 12, memory: 40Gi, gpus: 2}\ngpu: {min_compute_capability: 8.0}",
            T4,
            (
                ("cpus", "asks for 12 CPUs; gpu.t4 has 8"),
                ("memory", "asks for 40.0 GiB of memory; gpu.t4 has 32.0 GiB"),
                ("gpus", "asks for 2 GPUs; gpu.t4 has 1"),
                ("gpu_cc", "needs compute capability 8.0; gpu.t4 has 7.5 (Tesla T4)"),
            ),
        ),
        id="every-failure-recorded",
    ),
    pytest.param(
        FilterCase(
            "resources: {gpus: 1}\ngpu: {min_compute_capability: 9.0}",
            STD,
            (("gpus", "asks for 1 GPU; cpu.std has none"),),
        ),
        id="no-gpu-detail-without-gpus",
    ),
]


@pytest.mark.parametrize("case", FILTERS)
def test_filter_reasons(case: FilterCase) -> None:
    body = "s:\n  variants:\n    v:\n      image: img\n" + "".join(
        f"      {line}\n" for line in case.resources.split("\n")
    )
    # a roomy class that takes anything, so the step always has an option
    big = MachineClass("big", 1, 128, 4096 * GIB, gpus=8, gpu_model="NVIDIA H100", gpu_memory=80 * GIB, gpu_cc=(9, 0))
    (task,) = build(body, (case.on, big)).tasks

    assert tuple((r.code, r.reason) for r in task.rejected if r.machine_class == case.on.name) == case.rejected
    assert all(r.variant == "v" for r in task.rejected)
    assert (case.on.name in {o.machine_class for o in task.options}) == (not case.rejected)


def test_image_hook_rejects_with_its_reason() -> None:
    def arm_only(image: str, cls: MachineClass) -> str | None:
        return None if cls.name == "cpu.fast" else f"image {image} has no build for {cls.name}"

    (task,) = build("s:\n  image: img:1\n", image_check=arm_only).tasks

    assert [o.machine_class for o in task.options] == ["cpu.fast"]
    assert Rejection("default", "cpu.std", "image", "image img:1 has no build for cpu.std") in task.rejected


def test_a_step_that_fits_nowhere_names_every_reason() -> None:
    body = """
    ok:
      image: img
    huge:
      variants:
        gpu: {image: img, resources: {gpus: 8}}
        cpu: {image: img, resources: {cpus: 100}}
    """
    with pytest.raises(NoFitError) as exc:
        build(body, (STD, T4))
    message = str(exc.value)
    assert message.startswith("step 'huge' fits no machine class (")
    for part in (
        "gpu on cpu.std: asks for 8 GPUs; cpu.std has none",
        "gpu on gpu.t4: asks for 8 GPUs; gpu.t4 has 1",
        "cpu on cpu.std: asks for 100 CPUs; cpu.std has 16",
        "cpu on gpu.t4: asks for 100 CPUs; gpu.t4 has 8",
    ):
        assert part in message
    assert "'ok'" not in message


def test_an_optional_step_that_fits_nowhere_is_left_out_with_a_note() -> None:
    body = """
    a:
      image: img
      estimate: 5s
    extra:
      image: img
      resources: {gpus: 2}
      optional: true
    """
    loaded = load_steps(body)
    inst = build_instance(loaded.workflow, (STD,), bandwidth=1e9)

    assert [t.name for t in inst.tasks] == ["a"]
    assert instance_notes(loaded.workflow, inst) == (
        "step 'extra' is optional and fits no machine class; it will be skipped",
    )


# --- run times --------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeCase:
    variant: str  # YAML of one variant
    runtimes: dict[str, float]  # class -> seconds


RUNTIMES = [
    pytest.param(
        RuntimeCase(
            "{image: img, estimate: 100}", {"cpu.std": 100, "cpu.fast": 100 / 1.4, "gpu.t4": 100, "gpu.a100": 100 / 1.2}
        ),
        id="cpu-by-speed",
    ),
    pytest.param(
        RuntimeCase("{image: img, estimate: 10, resources: {gpus: 1}}", {"gpu.t4": 10 * 8.5 / 3.0, "gpu.a100": 10}),
        id="gpu-by-gpu-speed",
    ),
    pytest.param(
        RuntimeCase("{image: img, resources: {cpus: 2}}", {c.name: DEFAULT_ESTIMATE / c.speed for c in HETERO16}),
        id="no-estimate-60s",
    ),
]


@pytest.mark.parametrize("case", RUNTIMES)
def test_runtime_scaling(case: RuntimeCase) -> None:
    (task,) = build(f"s:\n  variants:\n    v: {case.variant}\n").tasks
    assert {o.machine_class: o.runtime for o in task.options} == pytest.approx(case.runtimes)


def test_measured_profile_wins_over_the_estimate_for_its_class_only() -> None:
    body = """
    s:
      variants:
        cpu: {image: img, estimate: 100}
        gpu: {image: img, estimate: 10, resources: {gpus: 1}}
    """
    profile = {("s", "cpu", "cpu.fast"): 42.0, ("s", "gpu", "gpu.t4"): 7.0, ("other", "cpu", "cpu.std"): 1.0}
    (task,) = build(body, profile=profile).tasks

    runtimes = {(o.variant, o.machine_class): o.runtime for o in task.options}
    assert runtimes[("cpu", "cpu.fast")] == 42.0
    assert runtimes[("gpu", "gpu.t4")] == 7.0
    assert runtimes[("cpu", "cpu.std")] == 100.0
    assert runtimes[("gpu", "gpu.a100")] == 10.0


def test_notes_name_variants_without_estimate_unless_measured() -> None:
    body = "a:\n  image: img\nb:\n  image: img\nc:\n  image: img\n  estimate: 3s\n"
    loaded = load_steps(body)
    inst = build_instance(loaded.workflow, (STD,), bandwidth=1e9, profile={("b", "default", "cpu.std"): 2.0})

    assert instance_notes(loaded.workflow, inst, {("b", "default", "cpu.std"): 2.0}) == (
        "step 'a' variant 'default' has no estimate; 60s assumed (add 'estimate', or run it once so its time "
        "is measured)",
    )


def test_options_keep_resources_and_follow_cluster_order() -> None:
    body = """
    s:
      variants:
        gpu: {image: img, resources: {cpus: 2, memory: 3Gi, gpus: 1}, estimate: 1}
        cpu: {image: img, resources: {cpus: 4}, estimate: 5}
    """
    (task,) = build(body).tasks

    assert [(o.variant, o.machine_class) for o in task.options] == [
        ("gpu", "gpu.t4"),
        ("gpu", "gpu.a100"),
        ("cpu", "cpu.std"),
        ("cpu", "cpu.fast"),
        ("cpu", "gpu.t4"),
        ("cpu", "gpu.a100"),
    ]
    assert task.options[0] == Option("gpu", "gpu.t4", 1 / (3.0 / 8.5), 2.0, 3 * GIB, 1)


# --- the DAG and its bytes --------------------------------------------------------------

DAG = """
merge:
  image: img
  inputs: {x: left/part.bin, y: right/out, z: left/part.bin}
  needs: [setup]
left:
  image: img
  outputs: [part.bin, log.txt]
  sizes: {part.bin: 1Mi, log.txt: 10}
right:
  image: img
  outputs: [out/a, out/b, other]
  sizes: {out/a: 100, out/b: 200, other: 4000}
  needs: [setup]
setup:
  image: img
  outputs: [unsized]
"""


def test_tasks_come_in_topological_order_and_edges_carry_bytes() -> None:
    inst = build(DAG)

    names = [t.name for t in inst.tasks]
    assert names.index("setup") < names.index("right") < names.index("merge")
    assert names.index("left") < names.index("merge")
    assert set(inst.edges) == {
        Edge("left", "merge", 1024**2),  # read twice (x and z), counted once
        Edge("right", "merge", 300),  # a directory input: every sized output under out/
        Edge("setup", "merge", 0.0),  # a bare `needs`
        Edge("setup", "right", 0.0),
    }
    assert inst.bandwidth == 1.25e9 and inst.one_task_per_machine is False


EDGE_BYTES = [
    pytest.param("left", "merge", 1024**2, id="file"),
    pytest.param("right", "merge", 300, id="directory"),
    pytest.param("setup", "merge", 0, id="needs-only"),
]


@pytest.mark.parametrize(("parent", "child", "size"), EDGE_BYTES)
def test_edge_bytes(parent: str, child: str, size: float) -> None:
    assert edge_bytes(load_steps(DAG).workflow, parent, child) == size


def test_an_unsized_output_carries_nothing() -> None:
    body = "a:\n  image: img\n  outputs: [f]\nb:\n  image: img\n  inputs: {f: a/f}\n"
    assert build(body).edges == (Edge("a", "b", 0.0),)


def test_one_task_per_machine_and_bandwidth_pass_through() -> None:
    inst = build_instance(load_steps("a:\n  image: img\n").workflow, (STD,), bandwidth=5.0, one_task_per_machine=True)
    assert (inst.bandwidth, inst.one_task_per_machine, inst.classes) == (5.0, True, (STD,))
    with pytest.raises(ValueError, match="bandwidth must be positive"):
        build_instance(load_steps("a:\n  image: img\n").workflow, (STD,), bandwidth=0)


# --- node labels (node_selector) ---------------------------------------------------------


def test_node_selector_is_a_hard_filter_with_its_reason() -> None:
    from hetflow.plan.instance import MachineClass
    from hetflow.spec.load.loader import parse_workflow

    text = """apiVersion: hetflow/v1
name: sel
steps:
  s:
    image: i
    node_selector: {zone: a}
    estimate: 10s
"""
    wf = parse_workflow(text, "w.yaml").workflow
    a = MachineClass("zone-a", 1, 4, 8 << 30, labels=(("zone", "a"),))
    b = MachineClass("zone-b", 1, 4, 8 << 30, labels=(("zone", "b"),))
    inst = build_instance(wf, [a, b], bandwidth=1e9)
    task = inst.task("s")
    assert [o.machine_class for o in task.options] == ["zone-a"]
    assert [(r.machine_class, r.code, r.reason) for r in task.rejected] == [
        ("zone-b", "labels", "needs node labels zone=a; zone-b has zone=b")
    ]
