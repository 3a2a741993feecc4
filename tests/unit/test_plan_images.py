"""The planner's image-compatibility filter: a variant whose image index has no build for a
node class is rejected there, with the resolver's reasons (FakeRegistry behind httpx)."""

from __future__ import annotations

import pytest

from hetflow.images.distribution.fake import FakeRegistry
from hetflow.images.service import ImageSource, build_index_image, resolve_image
from hetflow.inventory.models import Node
from hetflow.plan.build import build_instance
from hetflow.plan.feasible.images import class_node, image_check
from hetflow.plan.instance import MachineClass
from hetflow.spec.load.loader import parse_workflow

REPO = "hf/app"
REF = f"registry.test/{REPO}:latest"  # one index holding only a x86-64-v3 build
GPU_REF = f"registry.test/{REPO}:gpu-latest"  # one index holding only an sm_80, CUDA 12.2 build
GIB = 1024**3

V2 = MachineClass("cpu.old", 1, 8, 32 * GIB, microarchitecture="x86_64_v2")
HASWELL = MachineClass("cpu.haswell", 1, 8, 32 * GIB, microarchitecture="haswell")
A100 = MachineClass(
    "gpu.a100",
    1,
    48,
    384 * GIB,
    microarchitecture="icelake",
    gpus=4,
    gpu_model="NVIDIA A100-SXM4-40GB",
    gpu_memory=40 * GIB,
    gpu_cc=(8, 0),
    gpu_cuda="12.4",
)
A100_OLD_DRIVER = MachineClass(
    "gpu.a100-old",
    1,
    48,
    384 * GIB,
    microarchitecture="icelake",
    gpus=4,
    gpu_model="NVIDIA A100-SXM4-40GB",
    gpu_memory=40 * GIB,
    gpu_cc=(8, 0),
    gpu_cuda="11.8",
)


@pytest.fixture
def resolver() -> object:
    registry = FakeRegistry()
    for build in ("v3", "gpu"):
        registry.add_image(REPO, build, env={"BUILD": build})
    build_index_image(REF, ["v3=x86-64-v3"], ImageSource(transport=registry.transport()))
    build_index_image(GPU_REF, ["gpu=gpu:sm_80,cuda>=12.2"], ImageSource(transport=registry.transport()))

    def resolve(image: str, node: Node) -> object:
        return resolve_image(image, node, ImageSource(transport=registry.transport()))

    return resolve


WORKFLOW = f"""apiVersion: hetflow/v1
name: app
steps:
  s:
    variants:
      gpu: {{image: "{GPU_REF}", resources: {{gpus: 1}}, estimate: 1s}}
      cpu: {{image: "{REF}", estimate: 10s}}
"""


@pytest.mark.parametrize(
    ("cls", "variant", "phrase"),
    [
        (V2, "cpu", "x86-64-v3 build needs"),
        (A100_OLD_DRIVER, "gpu", "cuda>=12.2"),
    ],
    ids=["v3-only-index-on-v2-node", "cuda-12.2-build-on-11.8-driver"],
)
def test_rejected_with_the_resolvers_reason(resolver: object, cls: MachineClass, variant: str, phrase: str) -> None:
    wf = parse_workflow(WORKFLOW, "wf.yaml").workflow
    inst = build_instance(wf, [cls, HASWELL, A100], bandwidth=1e9, image_check=image_check(resolver))  # type: ignore[arg-type]
    rejected = [r for r in inst.task("s").rejected if r.machine_class == cls.name and r.variant == variant]
    assert len(rejected) == 1 and phrase in rejected[0].reason
    options = {(o.variant, o.machine_class) for o in inst.task("s").options}
    assert ("cpu", "cpu.haswell") in options and ("gpu", "gpu.a100") in options


def test_class_node_carries_what_matching_needs() -> None:
    node = class_node(A100)
    assert node.cpu.architecture == "x86_64" and node.cpu.x86_64_level == 4
    assert len(node.gpus) == 4 and node.gpus[0].compute_capability == "8.0" and node.gpus[0].cuda_version == "12.4"
    assert class_node(V2).cpu.x86_64_level == 2 and class_node(V2).gpus == ()
