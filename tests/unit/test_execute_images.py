"""pin_images: each step's image index pinned to this node's build before anything starts,
against a stand-in resolver (the resolver itself is tested in test_images_*)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hetflow.errors import NoFitError
from hetflow.execute.submit.pin import pin_images
from hetflow.images.errors import NotFoundError
from hetflow.images.service import ResolveResult
from hetflow.inventory.models import Cpu, Node
from hetflow.spec.load.loader import parse_workflow

NODE = Node(
    name="n1",
    cpu=Cpu(vendor="v", model="m", architecture="x86_64", microarchitecture="haswell", cores=4),
    memory_bytes=8 << 30,
)
DIGEST = "sha256:" + "a" * 64


def result(ref: str, chosen: bool) -> ResolveResult:
    return ResolveResult(
        reference=ref,
        node="n1",
        source="registry",
        digest=DIGEST,
        is_index=True,
        chosen=DIGEST if chosen else None,
        pinned=f"{ref.rsplit(':', 1)[0]}@{DIGEST}" if chosen else None,
        explanation=[] if chosen else ["sm_80 build needs a GPU with compute capability 8.0; node has no GPU"],
        verdicts=[],
    )


def resolver(image: str, node: Node) -> ResolveResult:
    if image.startswith("localhost/"):
        raise NotFoundError(f"no image {image} in local podman storage")
    return result(image, chosen="gpu-only" not in image)


def wf(steps: str) -> str:
    return f"apiVersion: hetflow/v1\nname: w\nsteps:\n{steps}"


def test_index_is_pinned_and_a_variant_without_a_build_is_dropped() -> None:
    text = wf("""  s:
    variants:
      gpu: {image: "reg.test:5000/app:gpu-only"}
      cpu: {image: "reg.test:5000/app:latest"}
""")
    pin = pin_images(parse_workflow(text, "w.yaml").workflow, NODE, resolver)
    variants = pin.workflow.steps["s"].resolved_variants()
    assert list(variants) == ["cpu"]
    assert variants["cpu"].image == f"reg.test:5000/app@{DIGEST}"
    assert pin.pulls == [f"reg.test:5000/app@{DIGEST}"]
    assert any("variant 'gpu'" in n and "compute capability 8.0" in n for n in pin.notes)


@pytest.mark.parametrize(("optional", "raises"), [(False, True), (True, False)], ids=["required", "optional"])
def test_step_with_no_build_fails_before_anything_starts_unless_optional(optional: bool, raises: bool) -> None:
    text = wf(f"""  s:
    image: "reg.test:5000/app:gpu-only"
    optional: {str(optional).lower()}
""")
    loaded = parse_workflow(text, "w.yaml").workflow
    if raises:
        with pytest.raises(
            NoFitError, match=re.escape("step 's': variant 'default': image reg.test:5000/app:gpu-only has no build")
        ):
            pin_images(loaded, NODE, resolver)
    else:
        pin = pin_images(loaded, NODE, resolver)
        assert any("optional and will be skipped" in n for n in pin.notes)


def test_missing_local_image_is_left_for_preflight(tmp_path: Path) -> None:
    text = wf("""  s:
    image: localhost/not/built:1
""")
    pin = pin_images(parse_workflow(text, "w.yaml").workflow, NODE, resolver)
    assert pin.workflow.steps["s"].image == "localhost/not/built:1" and pin.pulls == []


def test_a_step_nothing_is_pinned_in_stays_the_same_step_and_a_pinned_one_changes() -> None:
    text = wf("""  local:
    image: localhost/not/built:1
  two:
    variants:
      a: {image: localhost/not/built:1}
      b: {image: localhost/not/built:2}
  remote:
    variants:
      a: {image: localhost/not/built:1}
      b: {image: "reg.test:5000/app:latest"}
""")
    loaded = parse_workflow(text, "w.yaml").workflow
    pin = pin_images(loaded, NODE, resolver)
    assert pin.workflow.steps["local"] is loaded.steps["local"]
    assert pin.workflow.steps["two"] is loaded.steps["two"]
    remote = pin.workflow.steps["remote"]
    assert remote is not loaded.steps["remote"]
    assert {n: v.image for n, v in remote.resolved_variants().items()} == {
        "a": "localhost/not/built:1",
        "b": f"reg.test:5000/app@{DIGEST}",
    }
