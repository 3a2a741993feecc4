"""The dispatch's answers within one turn of the runner, for the many items of a fan-out.

Each turn the schedule asks the dispatch about every ready step; with 2,000 items waiting
for 8 slots that is 2,000 runs of the chooser's filter chain a turn, most of the runner's
CPU (issue 26: 120 ms a turn at 2,000 items, so quadratic over a run).  Items of one fan-out
that share what the choice reads get the same answer, and a "not now" (wait, or never fits)
stays so for the rest of the turn: launching only takes capacity away.  So ``Decisions``
keeps each such answer per ``shape`` until the next turn.

``shape``: on this machine (``LocalDispatch``), a fan-out item's parent, its planned variant,
and the identity of its resources, GPU ask, node selector, gang and variants objects.  An
item copies its step's and templates only its command, env, image, inputs and outputs
(``spec.expansion.fanout``); a settings override of one item's resources, or templated variants, give
it objects of its own, so it is decided alone.  A retry's adjusted step is always asked anew.

Across turns, a step told "wait" on this machine is told so again, unasked, while the
machine looks as it did then (the same free capacity and GPU tenants) and the step is the
same object: the chooser's answer is a function of those alone.  Serial steps (each takes
every CPU) were otherwise all asked again each turn, so quadratic over a run (50 ready steps:
2,600 runs of the chooser).
"""

from __future__ import annotations

from hetflow.execute.run.dispatching.dispatch import Decision, Dispatch, LocalDispatch
from hetflow.plan import PlanChooser
from hetflow.spec import Step, fanout_parent

Shape = tuple[object, ...]


def shape(name: str, step: Step, dispatch: Dispatch) -> Shape | None:
    """What the dispatch's answer for ``step`` depends on, besides free capacity; None when
    it is not one of many alike (not a fan-out item, or not this machine's dispatch)."""
    parent = fanout_parent(name)
    if parent is None or not isinstance(dispatch, LocalDispatch):
        return None
    chooser = dispatch.chooser
    planned = chooser.variants.get(name) if isinstance(chooser, PlanChooser) else None
    return (parent, planned, *map(id, (step.resources, step.gpu, step.node_selector, step.gang, step.variants)))


class Decisions:
    """``dispatch.decide``, with the "not now" answers kept per shape for the turn."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch
        self._not_now: dict[Shape, Decision] = {}
        self._waits: dict[str, tuple[Step, object, Decision]] = {}  # name -> (step, the view then, its wait)

    def new_turn(self) -> None:
        """Capacity may have come back (attempts ended): ask again."""
        self._not_now.clear()

    def decide(self, name: str, step: Step, adjusted: bool) -> Decision:
        """The dispatch's decision; ``adjusted``: ``step`` is a retry's adjusted copy."""
        key = None if adjusted else shape(name, step, self.dispatch)
        if key is not None and key in self._not_now:
            return self._not_now[key]
        if adjusted or not isinstance(self.dispatch, LocalDispatch):
            decision = self.dispatch.decide(name, step)
        else:
            view = self.dispatch.view()
            kept = self._waits.pop(name, None)
            if kept is not None and kept[0] is step and kept[1] == view:
                decision = kept[2]  # the machine looks as it did when the step was told to wait
            else:
                decision = self.dispatch.decide(name, step, view)
            if decision.wait and decision.variant is None:
                self._waits[name] = (step, view, decision)
        if key is not None and decision.variant is None:
            self._not_now[key] = decision
        return decision
