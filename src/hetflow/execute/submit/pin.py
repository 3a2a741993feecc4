"""Pin every step's image to the build that fits this node, before anything starts.

An image that is an index (a registry's, or a podman manifest list) is resolved for the
node (``images.matching.match``): the variant then runs the chosen build by digest, which the
state store records per attempt and ``hetflow show`` prints.  A variant whose image has
no build for the node is dropped with the reasons; a step left with no variant fails
the run before any container starts.  A plain local image runs by name, as before.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hetflow.errors import NoFitError
from hetflow.images import ImageSource, NotFoundError, ResolveResult, parse_reference, resolve_image
from hetflow.inventory import Node
from hetflow.spec import Step, Workflow

# None: leave the image as written (a check that could not, or need not, ask its registry)
Resolver = Callable[[str, Node], ResolveResult | None]


@dataclass
class PinResult:
    workflow: Workflow
    pinned: dict[str, str] = field(default_factory=dict)  # image reference -> what runs
    pulls: list[str] = field(default_factory=list)  # registry references to pull before running
    notes: list[str] = field(default_factory=list)


def default_resolver(image: str, node: Node) -> ResolveResult:
    """``image``'s build for ``node``: over TLS, unless the image is local or its registry loopback."""
    ref = parse_reference(image)
    return resolve_image(image, node, ImageSource(insecure=ref.local or ref.is_loopback))


def pin_images(workflow: Workflow, node: Node, resolver: Resolver = default_resolver) -> PinResult:
    result = PinResult(workflow)
    cache: dict[str, ResolveResult | None] = {}
    steps: dict[str, Step] = {}
    failures: list[str] = []
    for sname, step in workflow.steps.items():
        kept: dict[str, str] = {}
        dropped: list[str] = []
        for vname, variant in step.resolved_variants().items():
            if variant.image not in cache:
                try:
                    cache[variant.image] = resolver(variant.image, node)
                except NotFoundError:
                    if not parse_reference(variant.image).local:
                        raise
                    cache[variant.image] = None  # a missing local image: preflight names it, with its line
            res = cache[variant.image]
            if res is None:
                kept[vname] = variant.image
                continue
            if res.chosen is None or res.pinned is None:
                why = "; ".join(res.explain()) or "no build fits"
                dropped.append(f"variant {vname!r}: image {variant.image} has no build for {node.name}: {why}")
                continue
            kept[vname] = res.pinned
            if res.pinned != variant.image:
                result.pinned[variant.image] = res.pinned
                if not parse_reference(variant.image).local:
                    result.pulls.append(res.pinned)
        if dropped and not kept:
            if step.optional:
                result.notes.append(f"step {sname!r} is optional and will be skipped: " + "; ".join(dropped))
                steps[sname] = step
                continue
            failures.append(f"step {sname!r}: " + "; ".join(dropped))
            continue
        result.notes += [f"step {sname!r} {d}" for d in dropped]
        steps[sname] = _with_images(step, kept)
    if failures:
        raise NoFitError("no build of these images can run on this machine:\n  " + "\n  ".join(failures))
    result.workflow = workflow.model_copy(update={"steps": steps})
    result.pulls = sorted(set(result.pulls))
    return result


def _with_images(step: Step, images: dict[str, str]) -> Step:
    """The step with each kept variant's image pinned and the other variants dropped."""
    if step.variants is None:
        return step if images["default"] == step.image else step.model_copy(update={"image": images["default"]})
    if images.keys() == step.variants.keys() and all(images[n] == v.image for n, v in step.variants.items()):
        return step  # nothing pinned or dropped (a local image): the same step, its resolved variants kept
    variants = {n: v.model_copy(update={"image": images[n]}) for n, v in step.variants.items() if n in images}
    return step.model_copy(update={"variants": variants})
