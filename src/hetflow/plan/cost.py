"""What a plan costs in dollars.

The model: a step pays for the part of its node that it keeps from others, for as long as
it runs.  That part is its *dominant share* of the node, the largest of its cores, memory
and GPUs as fractions of the node's (the dominant resource of DRF, Ghodsi et al., NSDI 2011);
a dimension the node lacks (no GPUs) does not count.  In the one-task-per-machine model a
step holds the whole node, so its share is 1.  Hence, for each placement::

    (finish - start) / 3600  x  price_per_hour of its node's class  x  share

and the plan's cost is the sum.  A fraction of a GPU counts as that fraction: a shared step
(time-slicing or MPS) is charged its ``share`` of the GPU, and a MIG instance its slices of
the GPU's seven (``3g.40gb``: 3/7).  Idle time between steps is not charged: nodes are assumed
to be rented per use (or shared with other work), which keeps the cost independent of the
schedule's gaps.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hetflow.errors import HetflowError
from hetflow.plan.instance import Instance, MachineClass, Placement
from hetflow.spec import mig_slices

MIG_SLICES = 7  # compute slices of an A100 / H100 in MIG mode


def dominant_share(cls: MachineClass, cores: float, memory: int, gpus: float, one_task_per_machine: bool) -> float:
    """The largest fraction of ``cls``'s cores, memory or GPUs that the demand takes."""
    if one_task_per_machine:
        return 1.0
    share = 0.0
    if cls.cores > 0:
        share = max(share, cores / cls.cores)
    if cls.memory > 0:
        share = max(share, memory / cls.memory)
    if cls.gpus > 0:
        share = max(share, gpus / cls.gpus)
    return share


def placement_cost(cls: MachineClass, runtime: float, cores: float, memory: int, gpus: float, one_task: bool) -> float:
    """Dollars for one step of ``runtime`` seconds holding the demand on a node of ``cls``."""
    return runtime / 3600.0 * cls.price_per_hour * dominant_share(cls, cores, memory, gpus, one_task)


def plan_cost(instance: Instance, placements: Mapping[str, Placement] | Iterable[Placement]) -> float:
    """The dollar cost of ``placements`` under the model of this module's docstring.

    Accepts ``Plan.placements`` (a mapping) or any iterable of placements.  Raises
    ``HetflowError`` for a placement on a class that the instance does not have."""
    items = placements.values() if isinstance(placements, Mapping) else placements
    classes = {c.name: c for c in instance.classes}
    total = 0.0
    for p in items:
        cls = classes.get(p.machine_class)
        if cls is None:
            raise HetflowError(
                f"task {p.task!r} is placed on class {p.machine_class!r}, which the cluster does not have"
            )
        one = placement_cost(
            cls, p.finish - p.start, p.cores, p.memory, gpu_amount(cls, p), instance.one_task_per_machine
        )
        total += one * max(1, len(p.ranks))  # a gang: every replica holds the same
    return total


def gpu_amount(cls: MachineClass, p: Placement) -> float:
    """How much GPU ``p`` holds: its share, its MIG instance's slices of 7, or its whole GPUs."""
    if p.share > 0:
        return p.share
    if p.mig_device is not None and p.gpus:
        layout = cls.gpu_kind(p.gpus[0]).mig
        if p.mig_device < len(layout):
            return mig_slices(layout[p.mig_device]) / MIG_SLICES
    return float(len(p.gpus))
