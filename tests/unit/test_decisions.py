"""The runner's decisions on this machine: a step told to wait is not asked of the chooser
again while the machine looks the same (issue 43: serial steps were all asked every turn)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from hetflow.execute.run.attempts import Active
from hetflow.execute.run.dispatching.decisions import Decisions
from hetflow.execute.run.dispatching.dispatch import LocalDispatch
from hetflow.inventory import Cpu, Node
from hetflow.plan import Capacity, GreedyChooser, Tenant
from hetflow.plan.onemachine.choose import Choice
from hetflow.spec import Step, parse_workflow


class Counting(GreedyChooser):
    def __init__(self) -> None:
        self.asked: list[str] = []

    def choose(self, step: Step, node: Node, free: Capacity, name: str = "", tenants: Sequence[Tenant] = ()) -> Choice:
        self.asked.append(name)
        return super().choose(step, node, free, name, tenants)


class NoLeases:
    def leases(self) -> list[Any]:
        return []


def test_a_waiting_step_is_asked_again_only_once_the_machine_changed() -> None:
    wf = parse_workflow(
        "apiVersion: hetflow/v1\nname: d\nsteps:\n"
        + "".join(f"  s{i}:\n    image: busybox\n    command: [true]\n    resources: {{cpus: 2}}\n" for i in range(3))
    ).workflow
    node = Node(
        name="h",
        cpu=Cpu(model="x", vendor="x", architecture="x86_64", microarchitecture="x86_64", cores=2),
        memory_bytes=8 << 30,
    )
    chooser, active = Counting(), cast(dict[str, Active], {})
    dispatch = LocalDispatch(
        node=node, chooser=chooser, store=cast(Any, NoLeases()), backend=cast(Any, None), active=active, pid=1,
        alive=lambda pid: True,
    )  # fmt: skip
    decisions = Decisions(dispatch)
    assert decisions.decide("s0", wf.steps["s0"], False).variant == "default"
    active["s0"] = Active("s0", 1, "c0", 2, 512 << 20, ())  # launched: the machine is full
    for _ in range(3):  # turns in which nothing ended: s1 and s2 wait, asked once only
        decisions.new_turn()
        waits = [decisions.decide(n, wf.steps[n], False) for n in ("s1", "s2")]
        assert all(d.variant is None and d.wait for d in waits)
    assert chooser.asked == ["s0", "s1", "s2"]
    del active["s0"]  # it ended: both are asked again, and s1 runs
    decisions.new_turn()
    assert decisions.decide("s1", wf.steps["s1"], False).variant == "default"
    assert chooser.asked[3:] == ["s1"]
    active["s1"] = Active("s1", 1, "c1", 2, 512 << 20, ())
    assert decisions.decide("s2", wf.steps["s2"], True).wait  # a retry's adjusted step: always asked
    assert chooser.asked[4:] == ["s2"]
