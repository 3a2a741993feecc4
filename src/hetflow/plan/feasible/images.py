"""The planner's image-compatibility filter: a (variant, node class) pair is an option only
if the variant's image has a build the class can run (``images.matching.match``).

A class is matched as a node standing for all its machines: its micro-architecture, its
GPUs' compute capability and the CUDA version its driver supports (``gpus.cuda`` in the
cluster file).  An image that cannot be read from here (a local name on another
machine, an unreachable registry) is not held against any class; the run checks again."""

from __future__ import annotations

from collections.abc import Callable

import archspec.cpu

from hetflow.errors import HetflowError
from hetflow.images import ResolveResult
from hetflow.inventory import Cpu, Gpu, Node, x86_64_level
from hetflow.plan.instance import MachineClass

Resolver = Callable[[str, Node], ResolveResult | None]  # None: not asked, left as written


def class_node(c: MachineClass) -> Node:
    target = archspec.cpu.TARGETS.get(c.microarchitecture)
    arch = str(target.family) if target is not None else "x86_64"
    cpu = Cpu(
        vendor="",
        model=c.name,
        architecture=arch,
        microarchitecture=c.microarchitecture,
        x86_64_level=x86_64_level(target) if target is not None else None,
        cores=max(1, c.cores),
    )
    gpus = tuple(
        Gpu(
            index=i,
            uuid=f"GPU-class-{c.name}-{i}",
            model=c.gpu_model,
            memory_bytes=c.gpu_memory,
            compute_capability=f"{c.gpu_cc[0]}.{c.gpu_cc[1]}",
            driver_version="",
            cuda_version=c.gpu_cuda or None,
            device_path=f"/dev/nvidia{i}",
            minor=i,
        )
        for i in range(c.gpus)
    )
    return Node(name=c.name, cpu=cpu, memory_bytes=c.memory, gpus=gpus, gpu_source="cluster file")


def image_check(resolver: Resolver) -> Callable[[str, MachineClass], str | None]:
    """An ``ImageCheck`` for ``build_instance``, caching one resolution per (image, class)."""
    cache: dict[tuple[str, str], str | None] = {}
    unreadable: set[str] = set()  # asked once, not once per class

    def check(image: str, c: MachineClass) -> str | None:
        key = (image, c.name)
        if image in unreadable:
            return None
        if key not in cache:
            try:
                res = resolver(image, class_node(c))
            except HetflowError:
                unreadable.add(image)
                cache[key] = None  # unreadable from here: not a reason to reject
            else:
                cache[key] = (
                    None
                    if res is None or res.chosen  # None: not asked (the resolver left it as written)
                    else f"image {image} has no build for {c.name}: " + "; ".join(res.explain())
                )
        return cache[key]

    return check
