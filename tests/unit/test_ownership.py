"""The run's state has one owner (issue 39): nothing in execute/run sets another object's fields.

``compose.compose_runner`` builds every part of a run's executor whole; the run's mutable
state (the workflow as fan-outs expand, the attempts in flight, what retries changed for the
next attempts, the nodes lost) lives in ``Attempts`` and ``LostAttempts``, which hand the rest
read-only live views (``types.MappingProxyType``) and change it only in named methods (``hold``,
``release``, ``move_next``, ``set_workflow``, ``lose``).

``test_no_module_sets_fields_of_an_object_it_did_not_create`` parses every module under
execute/run and reports each assignment to an attribute of an object the function did not
create, or to an item of a dict reached through another object::

    self.attempts.cluster = True        a collaborator's field
    attempts.wf = wf                    a field of an object passed in
    attempts.active[name] = act         an item of another object's dict
    act = Active(...); act.replicas = n fine: the function made ``act``
    self.order = ...; self._seen[k] = v fine: its own

An Active record (the attempt in flight, a mutable record its owner keeps) is updated by the
parts that watch it; those few are named in ``FOREIGN_WRITES_ALLOWED`` with why, and an entry
that no longer matches fails, so the list cannot go stale.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

from hetflow.execute.run.attempts import Active
from hetflow.execute.run.runner import Runner
from tests.unit.builders import world

RUN = Path(__file__).resolve().parents[2] / "src" / "hetflow" / "execute" / "run"

_RECORD = "the attempt in flight (an Active record) as the engine reports it"
# "module::function::target" -> why the write is the writer's to make
FOREIGN_WRITES_ALLOWED: dict[str, str] = {
    "attempts.py::Attempts.poll::act.ended": "a batch item's own end, read from its batch: " + _RECORD,
    "attempts.py::Attempts.record_usage::act.measured": "its usage is read once: " + _RECORD,
    "attempts.py::Attempts._measure_now::act.measured": "its usage is read once: " + _RECORD,
    "engineview.py::EngineView.saw::act.waiting": "what a queueing engine says it waits for: " + _RECORD,
    "engineview.py::EngineView.note_times::act.ended": "the engine's own end of the job: " + _RECORD,
    "engineview.py::EngineView.note_times::act.started": "the engine's own start of the job: " + _RECORD,
    "engineview.py::EngineView.note_gpus::act.engine_gpus": "the GPUs the engine gave: " + _RECORD,
    "engineview.py::EngineView.note_wait::act.waiting": "what a queueing engine says it waits for: " + _RECORD,
    "launch/launcher.py::Launcher.submitted::act.waiting": "submitted to a queueing engine: " + _RECORD,
    "dispatching/growth.py::ElasticGangs._grow::act.resize": "an elastic gang stopping to grow: " + _RECORD,
    "dispatching/growth.py::ElasticGangs._grow::act.cpus": "an elastic gang stopping to grow: " + _RECORD,
    "dispatching/growth.py::ElasticGangs._grow::act.memory": "an elastic gang stopping to grow: " + _RECORD,
}


def _base(node: ast.expr) -> ast.expr:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node


def _depth(node: ast.expr) -> int:
    """How many attributes and items lead from the base name to ``node``."""
    n = 0
    while isinstance(node, ast.Attribute | ast.Subscript):
        node, n = node.value, n + 1
    return n


def _made_here(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names the function binds to what it calls a class to make (``act = Active(...)``)."""
    made: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name[:1].isupper():
                made |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return made


def _targets(node: ast.AST) -> Iterator[ast.expr]:
    if isinstance(node, ast.Assign):
        for t in node.targets:
            yield from (t.elts if isinstance(t, ast.Tuple) else [t])
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        yield node.target


def _foreign(target: ast.expr, made: set[str]) -> bool:
    base = _base(target)
    if not isinstance(target, ast.Attribute | ast.Subscript) or not isinstance(base, ast.Name):
        return False
    own = base.id in ("self", "cls") or base.id in made
    if isinstance(target, ast.Attribute):
        return not own or _depth(target) > 1  # x.field, self.part.field
    # an item: of a dict held by another object (attempts.active[k], self.attempts.next[k])
    return _depth(target) > 1 and (not own or _depth(target.value) > 1)


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")


def foreign_writes(source: str, module: str) -> set[str]:
    """``module::function::target`` of each write to a field of an object the function did
    not create, or to an item of another object's dict, in ``source``."""
    found: set[str] = set()
    for name, fn in _functions(ast.parse(source)):
        made = _made_here(fn)
        for node in ast.walk(fn):
            for t in _targets(node):
                if _foreign(t, made):
                    found.add(f"{module}::{name}::{ast.unparse(t.value if isinstance(t, ast.Subscript) else t)}")
    return found


def _scan(root: Path) -> set[str]:
    return {w for p in sorted(root.rglob("*.py")) for w in foreign_writes(p.read_text(), str(p.relative_to(root)))}


def test_no_module_sets_fields_of_an_object_it_did_not_create() -> None:
    found = _scan(RUN)
    unlisted = sorted(found - set(FOREIGN_WRITES_ALLOWED))
    gone = sorted(set(FOREIGN_WRITES_ALLOWED) - found)
    assert not unlisted, (
        "a part sets another's field, or an item of its dict: ask the owner by a named method "
        "(Attempts.hold, move_next, set_workflow), or build it whole in compose.compose_runner:\n" + "\n".join(unlisted)
    )
    assert not gone, "no longer written: remove from FOREIGN_WRITES_ALLOWED:\n" + "\n".join(gone)


# What the scan reports, on made-up modules: the writes the code before this pass made, and
# those that stay fine.
CASES = [
    (
        "a collaborator's field",
        "class R:\n def f(self):\n  self.attempts.cluster = True\n",
        {"R.f::self.attempts.cluster"},
    ),
    ("a field of a part passed in", "def f(attempts, wf):\n attempts.wf = wf\n", {"f::attempts.wf"}),
    ("chained fields", "class R:\n def f(self, wf):\n  self.wf = self.attempts.wf = wf\n", {"R.f::self.attempts.wf"}),
    ("an item of another's dict", "def f(attempts, a):\n attempts.active[a.step] = a\n", {"f::attempts.active"}),
    ("through a part", "def f(lr, a):\n lr.attempts.active[a.step] = a\n", {"f::lr.attempts.active"}),
    ("its own field", "class R:\n def f(self):\n  self.order = []\n  self._seen['a'] = 1\n", set()),
    ("a record it made", "def f(n):\n act = Active('a')\n act.replicas = n\n", set()),
    ("a local dict", "def f(steps, s):\n seen = {}\n seen[s] = 1\n steps[s] = 2\n", set()),
]


@pytest.mark.parametrize(("source", "expected"), [(s, e) for _, s, e in CASES], ids=[c[0] for c in CASES])
def test_the_scan_reports_writes_to_what_others_own(source: str, expected: set[str]) -> None:
    assert foreign_writes(textwrap.dedent(source), "m.py") == {f"m.py::{e}" for e in expected}


# The views the owner hands out are read-only (and live: they show what the owner holds now).
VIEWS: list[tuple[str, Callable[[Runner], Mapping[str, object]]]] = [
    ("attempts in flight", lambda r: r.attempts.active),
    ("next attempts", lambda r: r.attempts.next),
    ("lost nodes", lambda r: r.attempts.lost.nodes),
    ("the local dispatch's attempts in flight", lambda r: r.dispatch.active),  # type: ignore[attr-defined]
]


@pytest.mark.parametrize("view", [v for _, v in VIEWS], ids=[n for n, _ in VIEWS])
def test_a_part_given_a_view_of_the_run_state_cannot_change_it(
    tmp_path: Path, view: Callable[[Runner], Mapping[str, object]]
) -> None:
    runner = world(tmp_path, "a:\n  image: img\n  command: [w]\n").runner()
    with pytest.raises(TypeError):
        view(runner)["a"] = Active("a", 1, "hf-a-1", 1.0, 1, ())  # type: ignore[index]


def test_the_view_is_live_and_the_owner_changes_it_by_name(tmp_path: Path) -> None:
    runner = world(tmp_path, "a:\n  image: img\n  command: [w]\n").runner()
    act = Active("a", 1, "hf-a-1", 1.0, 1, ())
    runner.attempts.hold(act)
    assert runner.dispatch.active["a"] is act  # type: ignore[attr-defined]
    runner.attempts.move_next("a", None, "n1")
    assert runner.attempts.next["a"].lost_nodes == {"n1"}
