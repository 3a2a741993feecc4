"""What changes for a step's next attempt after one failed, by its ``retry:`` policy (pure).

- ``memory: xF``: after an out-of-memory kill, the failed variant asks F times the memory
  it asked (capped at what the machine or node class has; the note says when capped).
- ``cpus: xF``: every retry asks F times the CPUs (capped likewise).
- ``fallback``: the next attempt runs the next variant of the list.
- ``avoid_failed_node``: the next attempt avoids the node class the failed one ran on.
- ``Hints``: on a final failure, the policy that could have avoided it (said once per run).
- whatever the policy, no attempt of the run is pinned to a node that died under one of its
  attempts (``execute.lostattempts``, read by ``ClusterDispatch``): it goes to another node
  class that fits, or says why none does.

Each change is said in words (``memory 64Mi -> 256Mi after an out-of-memory kill``); the
runner shows them as the step's reason and in the run's events.  The changes hold for the
rest of this executor session (a resumed run starts from the workflow as written, as its
retry budget does).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from hetflow.spec import Retry, Step, format_bytes

OOM_EXIT = 137  # 128 + SIGKILL: what the kernel's OOM killer leaves (also a plain kill)
# The cgroup's peak at (nearly) its limit is the OOM evidence where neither the runtime
# (podman inspect .State.OOMKilled) nor the parent cgroup's oom_kill counter says it: on
# cgroup v1 the counter is not hierarchical (kernel docs, cgroup-v1/memory.rst 5.x), and
# the container's own cgroup is gone once it exits.  Seen here: runc, cgroup v1, a 64 MiB
# limit, an allocation of 200 MiB: exit 137, OOMKilled false, parent peak 64.25 MiB.
OOM_PEAK_FRACTION = 0.95


@dataclass(frozen=True)
class Failure:
    """What the runner knows of one failed attempt."""

    variant: str
    node: str  # what the attempt record names: this machine, or the planned node class
    exit_code: int | None
    cpus: float  # what one container asked
    memory: int
    oom_killed: bool | None = None  # the engine said so (None: it does not know)
    peak_memory: int | None = None  # the attempt's cgroup peak, when measured
    node_fault: bool = False  # the node died or was preempted under it


def out_of_memory(f: Failure) -> bool:
    """Exit 137 with evidence of the OOM killer: the engine's word, or a peak at the limit."""
    if f.exit_code != OOM_EXIT:
        return False
    if f.oom_killed:
        return True
    return f.peak_memory is not None and f.peak_memory >= OOM_PEAK_FRACTION * f.memory


@dataclass(frozen=True)
class NextAttempt:
    """The step's next attempt, as its failures so far changed it."""

    variant: str | None = None  # forced by a fallback (None: the usual choice)
    memory: Mapping[str, int] = field(default_factory=dict)  # variant -> bytes per container
    cpus: Mapping[str, float] = field(default_factory=dict)
    avoid: frozenset[str] = frozenset()  # node classes not to use
    changes: tuple[str, ...] = ()  # what the last failure changed, in words
    # nodes the step was moved off (``hetflow migrate`` without --to): a retry is never pinned to
    # one again; ``ClusterDispatch`` moves it off them, as off the run's failed nodes
    lost_nodes: frozenset[str] = frozenset()
    move_to: str | None = None  # ``hetflow migrate --to NODE``: the node (or node class) to run on next

    def describe(self) -> str:
        return "; ".join(self.changes)


Limits = tuple[float, int] | None  # (cpus, memory bytes) of the place it ran; None: unknown


def _grow(had: float, factor: float, cap: float | None) -> tuple[float, float]:
    """What ``had`` times ``factor`` is (what the policy asks), and that capped at ``cap``,
    what one node there holds (None: unknown, no cap): the one rule for memory and CPUs."""
    want = had * factor
    return want, min(want, cap) if cap else want


def after_failure(
    step: Step, policy: Retry, f: Failure, prior: NextAttempt | None, limits: Limits, *, cluster: bool
) -> NextAttempt:
    """The next attempt after failure ``f`` (``limits``: what one node there holds)."""
    nxt = prior or NextAttempt()
    changes: list[str] = []
    memory, cpus = dict(nxt.memory), dict(nxt.cpus)
    if policy.memory is not None and out_of_memory(f):
        want, got = (int(n) for n in _grow(f.memory, policy.memory, limits[1] if limits else None))
        if got > f.memory:
            memory[f.variant] = got
            said = f"memory {_mem(f.memory)} -> {_mem(got)} after an out-of-memory kill (exit {OOM_EXIT})"
            if got < want:
                said += f", capped at what {f.node} has (x{policy.memory:g} would be {_mem(want)})"
            changes.append(said)
        else:
            changes.append(f"memory stays {_mem(f.memory)} after an out-of-memory kill: {f.node} has no more")
    if policy.cpus is not None:
        cap_c = limits[0] if limits else None
        want_c, got_c = _grow(f.cpus, policy.cpus, cap_c)
        if got_c > f.cpus:
            cpus[f.variant] = got_c
            said = f"cpus {f.cpus:g} -> {got_c:g} on retry"
            if got_c < want_c:
                said += f", capped at the {cap_c:g} {f.node} has"
            changes.append(said)
    variant = nxt.variant
    names = tuple(step.resolved_variants())
    to = policy.next_variant(f.variant, names)
    if to is not None:
        variant = to
        why = "a node failure" if f.node_fault else f"exit {f.exit_code}" if f.exit_code is not None else "a failure"
        changes.append(f"variant {f.variant} -> {to} after {why}")
    avoid = nxt.avoid
    if policy.avoid_failed_node:
        if cluster:
            avoid = avoid | {f.node}
            changes.append(f"class {f.node} avoided after {'its node failed' if f.node_fault else 'a failure there'}")
        else:
            changes.append(f"avoid_failed_node: {f.node} is the only node here, so the retry runs on it again")
    return NextAttempt(variant, memory, cpus, avoid, tuple(changes), nxt.lost_nodes)


def adjusted(step: Step, nxt: NextAttempt | None) -> Step:
    """The step as its next attempt runs: the fallback variant only, resources grown."""
    if nxt is None or (nxt.variant is None and not nxt.memory and not nxt.cpus):
        return step
    if step.variants is None:
        if step.resources is None and not (nxt.memory or nxt.cpus):
            return step
        res = step.resolved_variants()["default"].resources
        grown = res.model_copy(
            update={"memory": nxt.memory.get("default", res.memory), "cpus": nxt.cpus.get("default", res.cpus)}
        )
        return step.model_copy(update={"resources": grown})
    variants = {}
    for name, v in step.variants.items():
        if nxt.variant is not None and name != nxt.variant:
            continue
        r = v.resources
        if name in nxt.memory or name in nxt.cpus:
            r = r.model_copy(update={"memory": nxt.memory.get(name, r.memory), "cpus": nxt.cpus.get(name, r.cpus)})
        variants[name] = v.model_copy(update={"resources": r})
    return step.model_copy(update={"variants": variants})


def without_changes(nxt: NextAttempt) -> NextAttempt:
    """The same next attempt, its changes said once already."""
    return replace(nxt, changes=())


def _mem(n: int) -> str:
    """``512Mi``, ``1Gi``, ``1.5Gi``: as a workflow writes memory."""
    for unit, size in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return format_bytes(n)


def exit_reason(code: int) -> str:
    hints = {
        125: "the container engine failed to run the container",
        126: "the command could not be executed (permission?)",
        127: "the command was not found in the image",
        137: "killed (SIGKILL: out of memory, or stopped)",
        143: "terminated (SIGTERM)",
    }
    return f"exited with code {code}" + (f" ({hints[code]})" if code in hints else "")


# --- hints: advice on a step's final failure that its ``retry:`` policy could have avoided
# (issue 42), each kind said once per run (the first step it fits; a hundred failed items say
# it once): ``oom``, exit 137 with no ``memory:`` in the policy (a retry of the same memory
# fails the same way); ``fallback``, a GPU variant failed and a variant without a GPU is left
# that no ``fallback:`` reaches.  ``attempts.Attempts.fail`` adds them to the step's reason.

OOM, FALLBACK = "oom", "fallback"


@dataclass
class Hints:
    """What a run has advised so far (each kind once)."""

    said: set[str] = field(default_factory=set)

    def on_final_failure(self, step: Step, variant: str, exit_code: int | None) -> str:
        """The hints for a step whose attempts are all spent, each kind not said before
        ('' when none), as ``; hint: ...`` for its reason."""
        found = [(k, text) for k, text in _hints(step, variant, exit_code) if k not in self.said]
        self.said |= {k for k, _ in found}
        return "".join(f"; hint: {text}" for _, text in found)


def _hints(step: Step, variant: str, exit_code: int | None) -> list[tuple[str, str]]:
    policy = step.retry_policy
    out = []
    if exit_code == OOM_EXIT and policy.memory is None:
        plain = " (plain `retries:` retries with the same memory)" if step.retry is None and policy.count else ""
        out.append(
            (
                OOM,
                f"exit 137 is an out-of-memory kill (or a stop); if it ran out of memory, {_with(step, 'memory: x2')}"
                f" asks twice the memory after each out-of-memory kill{plain}",
            )
        )
    variants = step.resolved_variants()
    failed = variants.get(variant)
    cpu = [n for n, v in variants.items() if not v.resources.uses_gpu]
    if (
        failed is not None
        and failed.resources.uses_gpu
        and cpu
        and policy.next_variant(variant, tuple(variants)) is None
    ):
        fallback = _with(step, f"fallback: [{variant}, {cpu[0]}]")
        out.append((FALLBACK, f"the GPU variant {variant!r} failed; {fallback} runs variant {cpu[0]!r} after it fails"))
    return out


def _with(step: Step, part: str) -> str:
    """Where to write ``part`` of a ``retry:`` policy on ``step``, in words (``retries: N``
    and ``retry:`` cannot both be set; a policy acts only with a retry to act on)."""
    if step.retry is not None:
        return f"`{part}` added to the step's `retry:`" + ("" if step.retry.count else " (with a `count:`)")
    if step.retries:
        return f"`retry: {{count: {step.retries}, {part}}}` in place of `retries: {step.retries}`"
    return f"`retry: {{count: 1, {part}}}` on the step"
