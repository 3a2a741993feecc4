"""Is a plan valid for its instance?  Every violation, as a sentence.

``check_plan(instance, plan) == []`` means: every task is placed once, on one of its
options, on a machine that exists; every data edge is respected, with the transfer time
``bytes / bandwidth`` paid when parent and child are on different machines; a gang holds
all its replicas at once (within ``per_node``) for its modelled run time; no machine is
ever over its cores, memory or GPU count (``model.fits``, asked at every start with the
instant's total; in the one-task-per-machine model: never runs two tasks at once); no GPU
index is given to two tasks at once, except as shared tenants within the node's sharing
policy and the slowdown model, and no MIG instance to two at once (``sharecheck``); and the
plan's makespan and cost are what its placements say.

Times are compared with a small relative tolerance (floating-point sums).  Intervals are
half-open: a task may start on a machine at the instant another finishes there.
"""

from __future__ import annotations

from collections import defaultdict

from hetflow.plan.cost import plan_cost
from hetflow.plan.feasible.gangs import gang_runtime, machine_shares
from hetflow.plan.instance import Instance, MachineClass, Option, Placement, Plan, Task, placed_option
from hetflow.plan.model.fit import CORES, GPUS, MEMORY, Demand, NodeState, fits
from hetflow.plan.sharing.sharecheck import check_slices, runtime_problem

_REL = 1e-9


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= _REL * max(1.0, abs(a), abs(b))


def _at_least(a: float, b: float) -> bool:
    """``a >= b`` up to rounding."""
    return a >= b - _REL * max(1.0, abs(a), abs(b))


def check_plan(instance: Instance, plan: Plan) -> list[str]:
    """Every way ``plan`` breaks ``instance``'s rules; an empty list when it is valid."""
    problems: list[str] = []
    valid = _check_placements(instance, plan, problems)
    _check_edges(instance, plan, problems)
    _check_machines(instance, valid, problems)
    _check_sliced(instance, plan, valid, problems)
    _check_totals(instance, plan, problems)
    return problems


def _check_sliced(
    instance: Instance, plan: Plan, valid: list[tuple[Placement, MachineClass]], problems: list[str]
) -> None:
    """Shared tenants and MIG instances, machine by machine (``sharecheck``)."""
    options: dict[str, Option] = {}
    for task in instance.tasks:
        p = plan.placements.get(task.name)
        o = placed_option(task.options, p) if p is not None else None
        if p is not None and o is not None:
            options[task.name] = o
    by_machine, classes = _holding(valid)
    for machine, items in by_machine.items():
        if any(p.share > 0 or p.mig_device is not None for p in items):
            check_slices(machine, classes[machine], items, options, problems)


def _check_placements(instance: Instance, plan: Plan, problems: list[str]) -> list[tuple[Placement, MachineClass]]:
    """Each task once, on one of its options, on a real machine.  Returns the placements
    whose machine is known, for the capacity checks."""
    classes = {c.name: c for c in instance.classes}
    machines = {c.name: set(c.machine_ids()) for c in instance.classes}
    names = {t.name for t in instance.tasks}
    valid: list[tuple[Placement, MachineClass]] = []
    for key in plan.placements:
        if key not in names:
            problems.append(f"placement for unknown task {key!r}")
    for task in instance.tasks:
        p = plan.placements.get(task.name)
        if p is None:
            problems.append(f"task {task.name!r} is not placed")
            continue
        where = f"task {task.name!r}"
        if p.task != task.name:
            problems.append(f"{where}: its placement names task {p.task!r}")
        if p.start < 0:
            problems.append(f"{where} starts at {p.start:g}, before time 0")
        option = placed_option(task.options, p)
        if option is None:
            problems.append(f"{where}: variant {p.variant!r} on class {p.machine_class!r} is not one of its options")
        else:
            _check_gang(instance, task, option, p, problems)
            wanted = gang_runtime(instance, task, option, len(p.per_machine()))
            shared = option.share > 0 and p.machine_class in {c.name for c in instance.classes}
            if shared and (why := runtime_problem(p, option, instance.machine_class(p.machine_class))):
                problems.append(why)
            elif not shared and not _close(p.finish - p.start, wanted):
                problems.append(
                    f"{where} runs {p.finish - p.start:g} s ({p.start:g} to {p.finish:g}); "
                    f"its option {p.variant!r} on {p.machine_class!r} takes {wanted:g} s"
                )
            if not _close(p.cores, option.cores) or p.memory != option.memory:
                problems.append(
                    f"{where} holds {p.cores:g} cores and {p.memory} bytes; "
                    f"its option asks for {option.cores:g} cores and {option.memory} bytes"
                )
            if len(p.gpus) != option.gpus:
                problems.append(
                    f"{where} was given {len(p.gpus)} GPU(s) {list(p.gpus)}; its option asks for {option.gpus}"
                )
        cls = classes.get(p.machine_class)
        if cls is None:
            problems.append(f"{where} is on class {p.machine_class!r}, which the cluster does not have")
            continue
        strays = [m for m in p.per_machine() if m not in machines[cls.name]]
        if strays:
            problems.append(f"{where} is on machine {strays[0]!r}, which is not a machine of class {cls.name!r}")
            continue
        for share in machine_shares(p):
            bad = [g for g in share.gpus if not 0 <= g < cls.gpus]
            if bad:
                problems.append(f"{where} uses GPU index(es) {bad} on {share.machine!r}, which has {cls.gpus} GPU(s)")
            if len(set(share.gpus)) != len(share.gpus):
                problems.append(f"{where} lists a GPU index twice on {share.machine!r}: {list(share.gpus)}")
            valid.append((share, cls))
    return valid


def _check_gang(instance: Instance, task: Task, option: Option, p: Placement, problems: list[str]) -> None:
    """A gang holds every replica at once, each with the option's GPUs, within per_node."""
    where = f"task {task.name!r}"
    if task.replicas <= 1:
        if p.ranks:
            problems.append(f"{where} is one container but its placement lists {len(p.ranks)} replicas")
        return
    if len(p.ranks) != task.replicas:
        problems.append(f"{where} is a gang of {task.replicas} replicas; its placement holds {len(p.ranks)}")
    if p.ranks and (p.machine, p.gpus) != p.ranks[0]:
        problems.append(f"{where}: its machine and GPUs are not those of rank 0 {p.ranks[0]}")
    for i, (_m, gpus) in enumerate(p.ranks):
        if len(gpus) != option.gpus:
            problems.append(f"{where}: replica {i} was given {len(gpus)} GPU(s); each replica asks for {option.gpus}")
    if task.per_node:
        crowded = {m: k for m, (k, _g) in p.per_machine().items() if k > task.per_node}
        for m, k in sorted(crowded.items()):
            problems.append(f"{where} puts {k} replicas on {m!r}; per_node allows {task.per_node}")


def _check_edges(instance: Instance, plan: Plan, problems: list[str]) -> None:
    for e in instance.edges:
        parent, child = plan.placements.get(e.parent), plan.placements.get(e.child)
        if parent is None or child is None:
            continue  # already reported as not placed
        delay = 0.0 if parent.machine == child.machine or e.bytes <= 0 else e.bytes / instance.bandwidth
        if not _at_least(child.start, parent.finish + delay):
            how = "on the same machine" if delay == 0.0 else f"plus {delay:g} s to move {e.bytes:g} bytes"
            problems.append(
                f"task {e.child!r} starts at {child.start:g}, before its parent {e.parent!r} "
                f"finishes at {parent.finish:g} ({how})"
            )


def _holding(
    valid: list[tuple[Placement, MachineClass]],
) -> tuple[dict[str, list[Placement]], dict[str, MachineClass]]:
    """The placements that hold their machine, grouped by machine, and each machine's class.
    A task of (next to) no length holds nothing; left in, its finish event (moved back by the
    rounding tolerance) would sort before its start."""
    by_machine: dict[str, list[Placement]] = defaultdict(list)
    classes: dict[str, MachineClass] = {}
    for p, cls in valid:
        if not _close(p.start, p.finish):
            by_machine[p.machine].append(p)
            classes[p.machine] = cls
    return by_machine, classes


def _check_machines(instance: Instance, valid: list[tuple[Placement, MachineClass]], problems: list[str]) -> None:
    by_machine, classes = _holding(valid)
    for machine, items in by_machine.items():
        cls = classes[machine]
        if instance.one_task_per_machine:
            _check_one_at_a_time(machine, items, problems)
        else:
            _check_capacity(machine, cls, items, problems)
        _check_gpu_indices(machine, items, problems)


def _overlaps(items: list[Placement]) -> list[tuple[Placement, Placement]]:
    """Pairs (the one running longest so far, the next) that share time, in start order."""
    items = sorted(items, key=lambda p: (p.start, p.finish, p.task))
    pairs = []
    latest = items[0]
    for p in items[1:]:
        if p.start < latest.finish and not _close(p.start, latest.finish):
            pairs.append((latest, p))
        if p.finish > latest.finish:
            latest = p
    return pairs


def _check_one_at_a_time(machine: str, items: list[Placement], problems: list[str]) -> None:
    for a, b in _overlaps(items):
        problems.append(
            f"machine {machine!r} runs {a.task!r} ({a.start:g} to {a.finish:g}) and "
            f"{b.task!r} ({b.start:g} to {b.finish:g}) at once; it runs one task at a time"
        )


def _check_capacity(machine: str, cls: MachineClass, items: list[Placement], problems: list[str]) -> None:
    """Sweep the start and finish events; at each instant compare the sums with the class."""
    events: list[tuple[float, int, Placement]] = []
    for p in items:
        events.append((p.start, 1, p))
        # 0 sorts first: a finish frees before a start at the same time (up to rounding).
        events.append((p.finish - _REL * max(1.0, abs(p.finish)), 0, p))
    events.sort(key=lambda e: (e[0], e[1], e[2].task))
    cores, memory, gpus = 0.0, 0, 0
    empty = NodeState(cls.cores, cls.memory, cls.gpus)  # the instant's total is asked of the empty machine
    active: dict[str, Placement] = {}
    reported: set[str] = set()
    for time, kind, p in events:
        sign = 1 if kind else -1
        cores += sign * p.cores
        memory += sign * p.memory
        gpus += sign * (0 if p.share > 0 or p.mig_device is not None else len(p.gpus))
        if kind:
            active[p.task] = p
        else:
            del active[p.task]
            continue
        refused = fits(empty, Demand(cores, memory, gpus))
        if refused and not all(name in reported for name in active):
            reported.update(active)
            words = {
                CORES: f"{cores:g} of {cls.cores} cores",
                MEMORY: f"{memory} of {cls.memory} bytes of memory",
                GPUS: f"{gpus} of {cls.gpus} GPUs",
            }
            over = [words[why] for why in refused]
            problems.append(
                f"machine {machine!r} is over capacity at t={time:g}: {', '.join(over)} "
                f"(tasks {', '.join(sorted(active))})"
            )


def _check_gpu_indices(machine: str, items: list[Placement], problems: list[str]) -> None:
    by_gpu: dict[int, list[Placement]] = defaultdict(list)
    for p in items:
        if p.share > 0 or p.mig_device is not None:
            continue  # tenants and MIG instances: sharecheck
        for g in set(p.gpus):
            by_gpu[g].append(p)
    for g, users in sorted(by_gpu.items()):
        for a, b in _overlaps(users):
            problems.append(
                f"GPU {g} of machine {machine!r} is given to {a.task!r} ({a.start:g} to "
                f"{a.finish:g}) and {b.task!r} ({b.start:g} to {b.finish:g}) at once"
            )


def _check_totals(instance: Instance, plan: Plan, problems: list[str]) -> None:
    finishes = [p.finish for p in plan.placements.values()]
    makespan = max(finishes, default=0.0)
    if not _close(plan.makespan, makespan):
        problems.append(f"the plan's makespan is {plan.makespan:g}; its last task finishes at {makespan:g}")
    known = {c.name for c in instance.classes}
    if all(p.machine_class in known for p in plan.placements.values()):
        cost = plan_cost(instance, plan.placements)
        if abs(plan.cost - cost) > 1e-6 * max(1.0, abs(cost)):
            problems.append(f"the plan's cost is {plan.cost:g}; its placements cost {cost:g}")
