"""Build the planning problem: a workflow and machine classes become an ``Instance``.

For every step (in topological order), every variant is checked against every machine
class by a chain of small filters, in the style of the Kubernetes scheduler framework's
Filter plugins and Nomad's feasibility checkers: each looks at one thing and answers with
``None`` (fits) or a ``Rejection`` whose reason names the number asked and the number the
class has.  A variant that passes every filter on a class is an ``Option`` with its run
time there.  Answers are cached per (resources, GPU constraint, image, class): steps that
ask alike are checked once (Nomad's computed node classes).

Run time of an option: the measured profile when there is one (history beats guesses),
else the variant's ``estimate`` divided by the class's CPU speed, or by its GPU speed for
a variant that uses GPUs (estimates are A100-referenced).  A variant with no estimate is
taken as ``DEFAULT_ESTIMATE`` seconds; ``instance_notes`` lists those.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Mapping, Sequence

from hetflow.errors import NoFitError
from hetflow.lazy import no_cyclic_gc
from hetflow.plan.feasible.filters import class_rejections, vendor_ok
from hetflow.plan.feasible.gangs import gang_rejections
from hetflow.plan.instance import Edge, Instance, MachineClass, Option, Rejection, Task
from hetflow.spec import GpuConstraint, Resources, Variant, Workflow, edges_of, topo_order

DEFAULT_ESTIMATE = 60.0  # seconds, for a variant with no estimate and no profile

Profile = Mapping[tuple[str, str, str], float]  # (step, variant, class) -> measured seconds
ImageCheck = Callable[[str, MachineClass], str | None]  # (image, class) -> why not, or None
Found = tuple[tuple[str, str], ...]  # (code, reason) of every filter a (variant, class) fails
Request = tuple[Resources, GpuConstraint | None, str, tuple[tuple[str, str], ...]]  # what filters read of a variant
# --- the builder ------------------------------------------------------------------------


def build_instance(
    workflow: Workflow,
    classes: Sequence[MachineClass],
    *,
    bandwidth: float,
    profile: Profile | None = None,
    one_task_per_machine: bool = False,
    image_check: ImageCheck | None = None,
) -> Instance:
    """The planning problem for ``workflow`` on ``classes``.

    Every failing filter of a (variant, class) pair is recorded as a ``Rejection``.  A step
    with no option at all raises ``NoFitError`` listing every such step with every reason;
    an ``optional`` step with no option is left out (it has no dependents, see
    ``spec.validate.checks``) and ``instance_notes`` says so."""
    if bandwidth <= 0:
        raise ValueError(f"bandwidth must be positive bytes/s, got {bandwidth}")
    with no_cyclic_gc():  # many small objects, no cycles: the collector would walk the heap for nothing
        return _build(workflow, classes, bandwidth, profile or {}, one_task_per_machine, image_check)


def _build(
    workflow: Workflow,
    classes: Sequence[MachineClass],
    bandwidth: float,
    profile: Profile,
    one_task_per_machine: bool,
    image_check: ImageCheck | None,
) -> Instance:
    deps = edges_of(workflow)
    # each distinct request (resources, GPU constraint, image, labels) numbered: many steps ask
    # alike, and a lookup by (number, class) hashes an int, not the request's models again
    # (pydantic's hash and == are Python code: 50,000 calls at 10,000 steps)
    requests: dict[Request, int] = {}
    # per request's number: class -> why not
    refused: list[dict[str, Found]] = []
    # (request's number, estimate, variant name, class) -> (run time from the estimate, its
    # options): alike steps get equal options, built once
    made: dict[tuple[int, float | None, str, str], tuple[float, list[Option]]] = {}

    def number_of(v: Variant, key: Request) -> int:
        number = requests.get(key)
        if number is None:
            per_class = {}
            for c in classes:
                found = [(st.code, st.reason) for st in class_rejections(v, c)]
                if image_check is not None and (why := image_check(v.image, c)):
                    found.append(("image", why))
                per_class[c.name] = tuple(found)
            number = requests[key] = len(refused)
            refused.append(per_class)
        return number

    tasks: list[Task] = []
    unfit: list[str] = []
    for name in topo_order(deps):
        step = workflow.steps[name]
        options: list[Option] = []
        rejected: list[Rejection] = []
        for vname, v in step.resolved_variants().items():
            key = (v.resources, v.gpu, v.image, tuple(sorted(v.node_selector.items())))
            number = number_of(v, key)
            per_class = refused[number]
            for c in classes:
                found = per_class[c.name]
                res = v.resources
                if step.gang is not None:
                    found = (
                        *found,
                        *gang_rejections(step.gang, c, res.cpus, res.memory, res.gpus, one_task_per_machine),
                    )
                if found:
                    rejected += [Rejection(vname, c.name, code, reason) for code, reason in found]
                    continue
                got = made.get((number, v.estimate, vname, c.name))
                if got is None:
                    estimate = _scaled_estimate(v, c)
                    got = made[(number, v.estimate, vname, c.name)] = (estimate, gpu_options(v, c, vname, estimate))
                measured = profile.get((name, vname, c.name))
                options += got[1] if measured is None else gpu_options(v, c, vname, measured)
        if options and step.gang is not None:
            g = step.gang
            tasks.append(Task(name, tuple(options), tuple(rejected), g.replicas, g.per_node or 0, float(g.comm)))
        elif options:
            tasks.append(Task(name, tuple(options), tuple(rejected)))
        elif not step.optional:
            unfit.append(_no_fit_message(name, rejected, classes))
    if unfit:
        raise NoFitError("\n".join(unfit))
    kept = {t.name for t in tasks}
    sizer = _EdgeSizer(workflow)
    edges = tuple(
        Edge(parent, child, sizer(parent, child))
        for child in (t.name for t in tasks)
        for parent in deps[child]
        if parent in kept
    )
    return Instance(tuple(tasks), edges, tuple(classes), float(bandwidth), one_task_per_machine)


def _scaled_estimate(v: Variant, c: MachineClass) -> float:
    """A GPU variant's ``estimate`` is its run time alone on an A100 (a ``gpu_share`` step:
    alone on a whole GPU; a ``gpu_mig`` step: on its MIG instance of an A100), divided by the
    speed of the class's GPUs that can serve it: of its vendor, in MIG mode for a MIG request
    and not for any other; on a machine of unlike GPUs the slowest of them (a class is
    described by its weakest GPU, as ``node_class`` does)."""
    estimate = DEFAULT_ESTIMATE if v.estimate is None else v.estimate
    if not v.uses_gpu:
        return estimate / c.speed
    req = v.gpu_request
    kinds = [c.gpu_kind(i) for i in range(c.gpus)]
    speeds = [k.speed for k in kinds if vendor_ok(k.vendor, req.vendor) and bool(k.mig) == (req.mig is not None)]
    return estimate / (min(speeds) if c.gpu_kinds and speeds else c.gpu_speed)


def gpu_options(v: Variant, c: MachineClass, vname: str, runtime: float) -> list[Option]:
    """The options of a variant that fits class ``c``: a ``gpu_share`` step gets, on a node
    that shares its GPUs (time-slicing or MPS), a shared option and a whole-GPU one (the
    planner picks whichever finishes first or costs less), on an exclusive node a whole-GPU
    option; a ``gpu_mig`` step one MIG instance; others their whole GPUs."""
    r, res = v.gpu_request, v.resources
    base = Option(vname, c.name, runtime, res.cpus, res.memory, r.devices, vendor=r.vendor)
    if r.share is not None:
        whole = base
        if c.gpu_sharing.shared:
            return [Option(vname, c.name, runtime, res.cpus, res.memory, 1, share=r.share, vendor=r.vendor), whole]
        return [whole]
    if r.mig is not None:
        return [Option(vname, c.name, runtime, res.cpus, res.memory, 1, mig=r.mig, vendor=r.vendor)]
    return [base]


def _no_fit_message(step: str, rejected: Sequence[Rejection], classes: Sequence[MachineClass]) -> str:
    if not classes:
        return f"step {step!r} cannot be placed: the cluster has no machines"
    reasons = "; ".join(f"{r.variant} on {r.machine_class}: {r.reason}" for r in rejected)
    return f"step {step!r} fits no machine class ({reasons}); lower the request or add a machine that has it"


def edge_bytes(workflow: Workflow, parent: str, child: str) -> float:
    """Bytes ``child`` reads from ``parent``: the ``sizes`` of the parent's outputs that the
    child's inputs name (a directory input counts every declared output under it, or its
    own size when ``sizes`` gives one); 0 when no size is known or the edge is a bare
    ``needs``."""
    return _EdgeSizer(workflow)(parent, child)


class _EdgeSizer:
    """``edge_bytes`` with each parent's normalised sizes and outputs computed once."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.outputs: dict[str, tuple[dict[str, int], list[str]]] = {}

    def __call__(self, parent: str, child: str) -> float:
        if parent not in self.outputs:
            pstep = self.workflow.steps[parent]
            sized = {posixpath.normpath(k): v for k, v in pstep.sizes.items()}
            self.outputs[parent] = (sized, [posixpath.normpath(o) for o in pstep.outputs])
        sizes, outputs = self.outputs[parent]
        read: set[str] = set()
        for ref in self.workflow.steps[child].inputs.values():
            src, _, path = ref.partition("/")
            if src != parent or not path:
                continue
            want = posixpath.normpath(path)
            if want in sizes:
                read.add(want)
            else:
                read.update(o for o in outputs if o.startswith(want + "/"))
        return float(sum(sizes.get(p, 0) for p in read))


def instance_notes(workflow: Workflow, instance: Instance, profile: Profile | None = None) -> tuple[str, ...]:
    """What ``build_instance`` assumed: variants run as ``DEFAULT_ESTIMATE`` for want of an
    estimate or a profile, and optional steps left out because nothing fits them."""
    profile = profile or {}
    notes: list[str] = []
    planned = {t.name for t in instance.tasks}
    for name, step in workflow.steps.items():
        if name not in planned:
            notes.append(f"step {name!r} is optional and fits no machine class; it will be skipped")
            continue
        for vname, v in step.resolved_variants().items():
            measured = any((name, vname, c.name) in profile for c in instance.classes)
            if v.estimate is None and not measured:
                notes.append(
                    f"step {name!r} variant {vname!r} has no estimate; {DEFAULT_ESTIMATE:g}s assumed "
                    "(add 'estimate', or run it once so its time is measured)"
                )
    return tuple(notes)
