"""Placement on one node: the filters, the greedy variant choice, and pre-run feasibility."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetflow.errors import Problem
from hetflow.inventory.models import Gpu, Node
from hetflow.plan.feasible.filters import Capacity, Status, check, gpu_qualifies, qualifying_gpus
from hetflow.plan.onemachine.choose import Choice, GreedyChooser, feasibility_problems, variant_order
from hetflow.spec import GpuConstraint, Resources, Variant
from tests.unit.builders import GIB, gpu, load_steps, node

T4 = gpu(0, model="Tesla T4", memory_gib=15, cc="7.5")
A100 = gpu(1, model="NVIDIA A100-SXM4-40GB", memory_gib=40, cc="8.0")
H100 = gpu(2, model="NVIDIA H100 80GB HBM3", memory_gib=80, cc="9.0")


def variant(*, cpus: float = 1, memory: int = GIB, gpus: int = 0, gpu_: GpuConstraint | None = None) -> Variant:
    return Variant(image="img", resources=Resources(cpus=cpus, memory=memory, gpus=gpus), gpu=gpu_)


def cap(cpus: float = 4, memory_gib: int = 16, gpus: tuple[Gpu, ...] = ()) -> Capacity:
    return Capacity(cpus, memory_gib * GIB, gpus)


# --- filters ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterCase:
    variant: Variant
    capacity: Capacity
    never: Status  # check(now=False): against what the node has
    now: Status  # check(now=True): against what is free


FILTERS = [
    pytest.param(FilterCase(variant(cpus=4), cap(), Status(), Status()), id="fits-exactly"),
    pytest.param(
        FilterCase(
            variant(cpus=8),
            cap(),
            Status("cpus", "asks for 8 CPUs; this machine has 4"),
            Status("cpus_busy", "needs 8 CPUs; 4 free now"),
        ),
        id="cpus",
    ),
    pytest.param(
        FilterCase(
            variant(cpus=0.5),
            cap(cpus=0.25),
            Status("cpus", "asks for 0.5 CPUs; this machine has 0.25"),
            Status("cpus_busy", "needs 0.5 CPUs; 0.25 free now"),
        ),
        id="fractional-cpus",
    ),
    pytest.param(
        FilterCase(
            variant(memory=32 * GIB),
            cap(),
            Status("memory", "asks for 32.0 GiB of memory; this machine has 16.0 GiB"),
            Status("memory_busy", "needs 32.0 GiB; 16.0 GiB free now"),
        ),
        id="memory",
    ),
    pytest.param(
        FilterCase(
            variant(gpus=1),
            cap(),
            Status("gpus", "asks for 1 GPU; this machine has none"),
            Status("gpus_busy", "needs 1 qualifying GPU; 0 free now"),
        ),
        id="no-gpus",
    ),
    pytest.param(
        FilterCase(
            variant(gpus=2),
            cap(gpus=(A100,)),
            Status("gpus", "asks for 2 GPUs; this machine has 1"),
            Status("gpus_busy", "needs 2 qualifying GPUs; 1 free now"),
        ),
        id="gpu-count",
    ),
    pytest.param(FilterCase(variant(gpus=2), cap(gpus=(T4, A100)), Status(), Status()), id="gpu-count-fits"),
    pytest.param(
        FilterCase(
            variant(gpus=1, gpu_=GpuConstraint(min_memory=20 * GIB)),
            cap(gpus=(T4,)),
            Status(
                "gpu_constraint",
                "asks for 1 GPU meeting its 'gpu' constraints; this machine has 0 "
                "(Tesla T4 has 15.0 GiB, needs 20.0 GiB)",
            ),
            Status("gpus_busy", "needs 1 qualifying GPU; 0 free now"),
        ),
        id="min-memory",
    ),
    pytest.param(
        FilterCase(
            variant(gpus=2, gpu_=GpuConstraint(min_compute_capability="8.0")),
            cap(gpus=(T4, A100)),
            Status(
                "gpu_constraint",
                "asks for 2 GPUs meeting its 'gpu' constraints; this machine has 1 "
                "(Tesla T4 has compute capability 7.5, needs 8.0)",
            ),
            Status("gpus_busy", "needs 2 qualifying GPUs; 1 free now"),
        ),
        id="min-compute-capability",
    ),
    pytest.param(
        FilterCase(
            variant(gpus=1, gpu_=GpuConstraint(models=("H100", "H200"))),
            cap(gpus=(T4, A100)),
            Status(
                "gpu_constraint",
                "asks for 1 GPU meeting its 'gpu' constraints; this machine has 0 "
                "(NVIDIA A100-SXM4-40GB is not one of H100, H200; Tesla T4 is not one of H100, H200)",
            ),
            Status("gpus_busy", "needs 1 qualifying GPU; 0 free now"),
        ),
        id="models",
    ),
    pytest.param(
        FilterCase(variant(gpus=1, gpu_=GpuConstraint(models=("h100",))), cap(gpus=(T4, H100)), Status(), Status()),
        id="models-case-insensitive-substring",
    ),
    pytest.param(
        FilterCase(
            variant(cpus=8, memory=32 * GIB, gpus=4),
            cap(),
            Status("cpus", "asks for 8 CPUs; this machine has 4"),
            Status("cpus_busy", "needs 8 CPUs; 4 free now"),
        ),
        id="first-failure-explains",
    ),
]


@pytest.mark.parametrize("case", FILTERS)
def test_check_words_never_and_now(case: FilterCase) -> None:
    assert check(case.variant, case.capacity, where="this machine", now=False) == case.never
    assert check(case.variant, case.capacity, where="this machine", now=True) == case.now


def test_check_names_the_place() -> None:
    status = check(variant(cpus=64), cap(), where="node gpu-a100-1", now=False)

    assert status.reason == "asks for 64 CPUs; node gpu-a100-1 has 4"


QUALIFIES = [
    pytest.param(A100, None, None, id="no-constraint"),
    pytest.param(A100, GpuConstraint(min_memory=40 * GIB, min_compute_capability="8.0"), None, id="exactly-enough"),
    pytest.param(
        A100,
        GpuConstraint(min_memory=41 * GIB),
        "NVIDIA A100-SXM4-40GB has 40.0 GiB, needs 41.0 GiB",
        id="memory",
    ),
    pytest.param(
        A100,
        GpuConstraint(min_compute_capability="8.6"),
        "NVIDIA A100-SXM4-40GB has compute capability 8.0, needs 8.6",
        id="minor-cc",
    ),
    pytest.param(
        gpu(0, cc="10.0"), GpuConstraint(min_compute_capability="9.0"), None, id="cc-compared-as-numbers-not-text"
    ),
    pytest.param(T4, GpuConstraint(models=("A100",)), "Tesla T4 is not one of A100", id="model"),
]


@pytest.mark.parametrize(("g", "want", "why"), QUALIFIES)
def test_gpu_qualifies(g: Gpu, want: GpuConstraint | None, why: str | None) -> None:
    assert gpu_qualifies(g, want) == why


def test_capacity_of_a_node_is_its_cores_memory_and_gpus() -> None:
    assert Capacity.of(node(cpus=8, memory_gib=32, gpus=(T4, A100))) == Capacity(8.0, 32 * GIB, (T4, A100))


@given(
    cpus=st.sampled_from([0.5, 1, 2, 4, 8]),
    memory_gib=st.integers(1, 64),
    gpus=st.integers(0, 3),
    min_cc=st.sampled_from(["0.0", "7.5", "8.0", "9.0"]),
    free_cpus=st.sampled_from([0, 0.5, 2, 4, 8]),
    free_gib=st.integers(0, 64),
    free_gpus=st.lists(st.sampled_from([T4, A100, H100]), max_size=3, unique=True),
)
def test_never_and_now_agree_on_fit_and_differ_only_in_wording(
    cpus: float, memory_gib: int, gpus: int, min_cc: str, free_cpus: float, free_gib: int, free_gpus: list[Gpu]
) -> None:
    v = variant(cpus=cpus, memory=memory_gib * GIB, gpus=gpus, gpu_=GpuConstraint(min_compute_capability=min_cc))
    c = Capacity(free_cpus, free_gib * GIB, tuple(free_gpus))

    never = check(v, c, where="here", now=False)
    now = check(v, c, where="here", now=True)

    assert never.ok == now.ok
    assert never.code in {"ok", "cpus", "memory", "gpus", "gpu_constraint"}
    assert now.code in {"ok", "cpus_busy", "memory_busy", "gpus_busy"}
    if now.ok:
        assert len(qualifying_gpus(v, c.gpus)) >= gpus
        assert cpus <= free_cpus and memory_gib <= free_gib


# --- the greedy chooser ----------------------------------------------------------------

POOL = load_steps(
    """
    pool:
      variants:
        cpu:
          image: pool:cpu
          resources: {cpus: 2}
        gpu:
          image: pool:cuda
          resources: {gpus: 1}
          gpu: {min_compute_capability: "8.0"}
    """
).workflow.steps["pool"]

GPU_NODE = node(cpus=4, gpus=(T4, A100))
CPU_NODE = node(cpus=4)

CHOICES = [
    pytest.param(
        GPU_NODE,
        Capacity.of(GPU_NODE),
        Choice("gpu", (A100,), False, "gpu: 1 qualifying GPU(s) free", ()),
        id="gpu-variant-with-the-qualifying-gpu",
    ),
    pytest.param(
        GPU_NODE,
        cap(cpus=4, gpus=(T4,)),
        Choice(
            "cpu",
            (),
            False,
            "cpu: chosen because no GPU variant can run now (GPUs busy)",
            (("gpu", "needs 1 qualifying GPU; 0 free now"),),
        ),
        id="cpu-variant-when-the-gpu-is-busy",
    ),
    pytest.param(
        CPU_NODE,
        Capacity.of(CPU_NODE),
        Choice(
            "cpu",
            (),
            False,
            "cpu: chosen because no GPU variant can run on this machine",
            (("gpu", "asks for 1 GPU; this machine has none"),),
        ),
        id="cpu-variant-on-a-machine-without-gpus",
    ),
    pytest.param(
        GPU_NODE,
        cap(cpus=1, gpus=()),
        Choice(
            None,
            (),
            True,
            "",
            (("gpu", "needs 1 qualifying GPU; 0 free now"), ("cpu", "needs 2 CPUs; 1 free now")),
        ),
        id="wait-when-nothing-fits-now",
    ),
    pytest.param(
        node(cpus=1),
        Capacity.of(node(cpus=1)),
        Choice(
            None,
            (),
            False,
            "",
            (("gpu", "asks for 1 GPU; this machine has none"), ("cpu", "asks for 2 CPUs; this machine has 1")),
        ),
        id="no-fit-ever",
    ),
    pytest.param(
        node(cpus=1, gpus=(T4,)),
        cap(cpus=0, gpus=(T4,)),
        Choice(
            None,
            (),
            False,
            "",
            (
                (
                    "gpu",
                    "asks for 1 GPU meeting its 'gpu' constraints; this machine has 0 "
                    "(Tesla T4 has compute capability 7.5, needs 8.0)",
                ),
                ("cpu", "asks for 2 CPUs; this machine has 1"),
            ),
        ),
        id="wrong-gpu-and-too-few-cpus-is-no-fit-not-wait",
    ),
]


@pytest.mark.parametrize(("n", "free", "expected"), CHOICES)
def test_greedy_choice(n: Node, free: Capacity, expected: Choice) -> None:
    choice = GreedyChooser().choose(POOL, n, free)

    assert choice == expected


def test_choice_explain_lists_why_and_every_rejection() -> None:
    choice = GreedyChooser().choose(POOL, GPU_NODE, cap(cpus=4, gpus=()))

    assert choice.explain() == (
        "cpu: chosen because no GPU variant can run now (GPUs busy); gpu: needs 1 qualifying GPU; 0 free now"
    )


def test_single_image_step_fits_as_default() -> None:
    step = load_steps("a: {image: x, resources: {cpus: 4}}").workflow.steps["a"]

    assert GreedyChooser().choose(step, CPU_NODE, Capacity.of(CPU_NODE)) == Choice(
        "default", (), False, "default: fits"
    )


def test_gpu_variants_come_first_most_gpus_first_then_file_order() -> None:
    step = load_steps(
        """
        s:
          variants:
            cpu-a: {image: x}
            one: {image: x, resources: {gpus: 1}}
            cpu-b: {image: x}
            two: {image: x, resources: {gpus: 2}}
        """
    ).workflow.steps["s"]
    n = node(gpus=(T4, A100, H100))

    assert variant_order(step) == ["two", "one", "cpu-a", "cpu-b"]
    assert GreedyChooser().choose(step, n, Capacity.of(n)).gpus == (T4, A100)
    assert GreedyChooser().choose(step, n, cap(gpus=(H100,))) == Choice(
        "one", (H100,), False, "one: 1 qualifying GPU(s) free", (("two", "needs 2 qualifying GPUs; 1 free now"),)
    )


# --- feasibility before a run -----------------------------------------------------------

FEASIBILITY_WORKFLOW = """
pool:
  variants:
    gpu:
      image: pool:cuda
      resources: {gpus: 1}
    cpu:
      image: pool:cpu
train:
  image: train
  resources:
    gpus: 2
extra:
  image: extra
  optional: true
  resources: {cpus: 64}
fine:
  image: fine
"""


def test_feasibility_problems_note_error_and_optional_note() -> None:
    loaded = load_steps(FEASIBILITY_WORKFLOW)

    assert feasibility_problems(loaded, CPU_NODE) == [
        Problem(
            "wf.yaml",
            8,
            "step 'pool' variant 'gpu' asks for 1 GPU; this machine has none; variant 'cpu' will be used here",
            "note",
        ),
        Problem(
            "wf.yaml",
            13,
            "step 'train' asks for 2 GPUs; this machine has none; lower the request or run on a machine that has it",
            "error",
        ),
        Problem(
            "wf.yaml",
            18,
            "step 'extra' asks for 64 CPUs; this machine has 4; the step is optional and will be skipped",
            "note",
        ),
    ]


def test_feasibility_on_a_machine_that_has_everything_is_silent() -> None:
    loaded = load_steps(FEASIBILITY_WORKFLOW)

    assert feasibility_problems(loaded, node(cpus=64, gpus=(T4, A100))) == []


@pytest.mark.parametrize(
    ("labels", "errors"),
    [({}, ["step 's' needs node labels zone=a; this machine has none"]), ({"zone": "a"}, [])],
    ids=["unlabelled-machine", "labelled-machine"],
)
def test_node_selector_on_this_machine(labels: dict[str, str], errors: list[str]) -> None:
    loaded = load_steps("s:\n  image: x\n  node_selector: {zone: a}\n")
    n = CPU_NODE.model_copy(update={"labels": labels})
    found = [p.message for p in feasibility_problems(loaded, n) if p.severity == "error"]
    assert [m.split("; lower")[0] for m in found] == errors


# --- one filter family: the planner's class view and this machine's view agree ----------

ALIKE_GPUS = [(), (T4,), (A100, gpu(3, model="NVIDIA A100-SXM4-40GB", memory_gib=40, cc="8.0"))]
REQUESTS = [
    variant(),
    variant(cpus=8),
    variant(memory=64 * GIB),
    variant(gpus=1),
    variant(gpus=2),
    variant(gpus=1, gpu_=GpuConstraint(min_compute_capability="8.0")),
    variant(gpus=1, gpu_=GpuConstraint(min_memory=20 * GIB)),
    variant(gpus=1, gpu_=GpuConstraint(models=("A100",))),
]


@pytest.mark.parametrize("gpus", ALIKE_GPUS, ids=["no-gpu", "one-t4", "two-a100"])
@pytest.mark.parametrize("v", REQUESTS, ids=lambda v: f"{v.resources.cpus:g}c-{v.resources.gpus}g-{v.gpu}")
def test_node_and_class_views_agree_on_what_fits(gpus: tuple[Gpu, ...], v: Variant) -> None:
    """The planner (a class of alike nodes) and the local preflight (this machine) run the
    same filters, so a machine and its class say the same about whether a variant fits."""
    from hetflow.plan.feasible.filters import class_rejections
    from hetflow.plan.sizing.cluster import node_class

    n = node(cpus=4, memory_gib=16, gpus=gpus)
    local = check(v, Capacity.of(n), where="this machine", now=False, labels=n.labels)
    planner = class_rejections(v, node_class(n))

    assert local.ok == (not planner), (local, planner)
    if not local.ok and local.code in {"cpus", "memory", "gpus"}:
        assert local.code == planner[0].code
