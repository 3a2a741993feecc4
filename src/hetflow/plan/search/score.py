"""Score plugins: how a list-scheduling pass ranks one task's candidate placements.

Filters (``plan.feasible.filters``) decide where a task *can* run; a score decides where it
*should*, as the Kubernetes scheduler framework separates Filter from Score.  A pass
(``plan.search.listpass.ListPass``) asks its rule's score to pick one candidate per task; most
scores rank the candidates the filters and the GPU policy allowed by a key (lowest wins),
and earliest finish, the default, searches the machines with pruning instead of listing
every candidate.

A candidate is ``(finish, avoid-flag, machine, option index, start, choice)``; ties are
broken by ``cand[:4]``: finish, then a non-GPU node, then the lower machine, then the
earlier option (the HEFT paper's processor order).  To add a score: a class with a
``name`` and ``pick`` (or ``key``, subclassing ``KeyScore``), registered in ``SCORES``
under the name a ``Rule.kind`` gives.  ``Rule`` and ``Candidate`` live here, with the
scores they parameterize; ``ListPass`` is the protocol of what a score reads of its pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from hetflow.plan.search.compiled import Choice

# A candidate placement: (finish, avoid-flag, machine, option index, start, choice).  Tuples
# compare in that order, so ties go to a non-GPU node (gpu_policy "avoid"), then to the
# lower machine number (class order, then index in class), then to the earlier option:
# exactly the processor order of the HEFT paper when every class has one machine.  (Within a
# class of several machines, ``ListPass.scan`` takes the first machine that is free from the
# ready time on without looking for a busier one that might tie.)
Candidate = tuple[float, int, int, int, float, Choice]


@dataclass(frozen=True)
class Rule:
    """How a pass picks among a task's candidates.

    ``eft``: earliest finish (HEFT).  ``lookahead``: earliest finish of the task's most
    critical child, given the choice.  ``subdeadline``: cheapest that finishes by the task's
    sub-deadline, else earliest finish.  ``budget``: earliest finish among those within the
    task's share of the budget, else cheapest.  ``cheapest``: cheapest, then earliest.
    ``peft``: earliest finish plus the optimistic time still needed after the task on that
    class (PEFT, Arabnejad and Barbosa, IEEE TPDS 25(3), 2014)."""

    kind: str = "eft"
    avoid: bool = True  # gpu_policy "avoid"
    subdeadline: tuple[float, ...] = ()
    budget: float = math.inf
    weight: tuple[float, ...] = ()  # budget rule: share of the spare budget per task, over the rest
    spend: float = 1.0  # budget rule: the share is multiplied by this (no weights: all of the spare)
    optimistic: tuple[tuple[float, ...], ...] = ()  # peft rule: per task and class, the rest's best case


class ListPass(Protocol):
    """What a score reads of the pass it ranks for (``plan.search.listpass.ListPass`` is one): its
    rule, its budget so far, and its candidate searches.  A protocol, so that the pass can
    use the scores without the scores importing the pass."""

    rule: Rule
    min_cost: list[float]  # per task, its cheapest choice's cost
    spent: float  # cost of the tasks placed so far
    cheapest_left: float  # the least the tasks not placed yet can cost
    weight_left: float  # budget rule: the weights of the tasks not placed yet

    def allowed(self, cands: list[Candidate]) -> list[Candidate]: ...

    def per_choice(self, t: int) -> list[Candidate]: ...

    def earliest(self, t: int) -> Candidate: ...

    def child_finish(self, t: int, cand: Candidate) -> float: ...


class Score(Protocol):
    """Picks the candidate placement of task ``t`` in pass ``p``."""

    name: str

    def pick(self, p: ListPass, t: int) -> Candidate: ...


class KeyScore:
    """A score that ranks every allowed candidate by ``key``; the lowest key wins."""

    name = ""

    def key(self, p: ListPass, t: int, cand: Candidate) -> tuple[Any, ...]:
        raise NotImplementedError

    def pick(self, p: ListPass, t: int) -> Candidate:
        return min(p.allowed(p.per_choice(t)), key=lambda c: self.key(p, t, c))


class EarliestFinish:
    """HEFT's rule: the earliest finish, found by a pruned search over the machines."""

    name = "eft"

    def pick(self, p: ListPass, t: int) -> Candidate:
        return p.earliest(t)


class Lookahead(KeyScore):
    """The earliest finish of the task's most critical child, given the choice."""

    name = "lookahead"

    def key(self, p: ListPass, t: int, cand: Candidate) -> tuple[Any, ...]:
        return (p.child_finish(t, cand), cand[:4])


class Peft(KeyScore):
    """Finish plus the optimistic time still needed after the task on that class (PEFT,
    Arabnejad and Barbosa, IEEE TPDS 25(3), 2014)."""

    name = "peft"

    def key(self, p: ListPass, t: int, cand: Candidate) -> tuple[Any, ...]:
        return (cand[0] + p.rule.optimistic[t][cand[5].cls], cand[:4])


class SubDeadline(KeyScore):
    """The cheapest candidate that finishes by the task's sub-deadline, else the earliest."""

    name = "subdeadline"

    def key(self, p: ListPass, t: int, cand: Candidate) -> tuple[Any, ...]:
        if cand[0] <= p.rule.subdeadline[t]:
            return (0, cand[5].cost, cand[:4])
        return (1, cand[:4])


class Budget(KeyScore):
    """The earliest finish among candidates within the task's share of the budget, else
    the cheapest."""

    name = "budget"

    def key(self, p: ListPass, t: int, cand: Candidate) -> tuple[Any, ...]:
        rule = p.rule
        spare = max(0.0, rule.budget - p.spent - p.cheapest_left)
        share = rule.spend * rule.weight[t] / p.weight_left if p.weight_left > 0 else 1.0
        allowance = p.min_cost[t] + spare * min(1.0, share)
        if cand[5].cost <= allowance * (1 + 1e-12):
            return (0, cand[:4])
        return (1, cand[5].cost, cand[:4])


class Cheapest(KeyScore):
    """The cheapest candidate, then the earliest."""

    name = "cheapest"

    def key(self, p: ListPass, t: int, cand: Candidate) -> tuple[Any, ...]:
        return (cand[5].cost, cand[:4])


SCORES: dict[str, Score] = {
    s.name: s for s in (EarliestFinish(), Lookahead(), Peft(), SubDeadline(), Budget(), Cheapest())
}


def score_for(kind: str) -> Score:
    """The score a ``Rule.kind`` names; unknown kinds rank by cost, as before."""
    return SCORES.get(kind, SCORES["cheapest"])
