"""Every backend's test class runs every part of the backend contract (``tests.contract.parts``):
a backend whose class leaves a part out, names in ``LACKS``/``BUGS`` a part or test that does
not exist, or a backend the factory knows that has no row, fails here.  Read from the test
modules' source (ast), so the slow backends' modules (Ray, Kubernetes) are not imported."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from hetflow.execute.backends import registry
from tests.contract import backend_contract, gang_contract, node_contract
from tests.contract.parts import BACKENDS, PARTS

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [pytest.param(b, p, id=f"{b}-{p.replace(' ', '-')}") for b in BACKENDS for p in PARTS]


def contract_class(backend: str) -> ast.ClassDef:
    path, name = BACKENDS[backend]
    tree = ast.parse((ROOT / path).read_text())
    found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    assert len(found) == 1, f"{path} has no class {name}"
    return found[0]


def bases(cls: ast.ClassDef) -> set[str]:
    return {b.id if isinstance(b, ast.Name) else ast.unparse(b) for b in cls.bases}


def declared(cls: ast.ClassDef, attribute: str) -> dict[str, str]:
    """The literal mapping ``attribute`` of the class (``LACKS``, ``BUGS``); {} if absent."""
    for node in cls.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
        elif isinstance(node, ast.Assign):
            target, value_node = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == attribute:
            value = ast.literal_eval(value_node)
            assert isinstance(value, dict), f"{cls.name}.{attribute} is not a literal mapping"
            return value
    return {}


@pytest.mark.parametrize(("backend", "part"), PAIRS)
def test_every_backend_runs_every_part(backend: str, part: str) -> None:
    cls = contract_class(backend)
    assert PARTS[part].__name__ in bases(cls), (
        f"{BACKENDS[backend][0]}: {cls.name} does not run the {part} part ({PARTS[part].__name__}); "
        "subclass it, and name in LACKS what the backend truly lacks, with the reason"
    )


def part_tests() -> dict[str, str]:
    """Every contract test's name -> its part's name."""
    return {name: part for part, cls in PARTS.items() for name in vars(cls) if name.startswith("test_")}


@pytest.mark.parametrize("backend", BACKENDS)
def test_what_a_backend_lacks_or_fails_is_a_part_or_test_of_the_contract_with_a_reason(backend: str) -> None:
    cls, known = contract_class(backend), {*PARTS, *part_tests()}
    for attribute in ("LACKS", "BUGS"):
        for key, reason in declared(cls, attribute).items():
            assert key in known, f"{cls.name}.{attribute}: {key!r} is no part or test of the contract"
            assert len(reason) > 20, f"{cls.name}.{attribute}[{key!r}]: say why"
    assert not set(declared(cls, "BUGS")) - set(part_tests()), f"{cls.name}.BUGS names tests, not parts"


def test_every_contract_class_is_a_part_and_every_backend_has_a_row() -> None:
    made = {
        c.__name__
        for module in (backend_contract, gang_contract, node_contract)
        for _, c in inspect.getmembers(module, inspect.isclass)
        if c.__module__ == module.__name__ and any(n.startswith("test_") for n in vars(c))
    }
    assert made == {c.__name__ for c in PARTS.values()}, "a contract class that is not in PARTS runs nowhere"
    assert set(BACKENDS) == {*registry.names(), "fake"}, "every backend the registry lists has a row"


def test_the_table_fails_a_backend_that_leaves_a_part_out() -> None:
    """On the code before this table: Slurm ran base and ordering only."""
    cls = ast.parse("class TestSlurmBackend(BackendContract, OrderingContract):\n    pass\n").body[0]
    assert isinstance(cls, ast.ClassDef)
    assert {c.__name__ for c in PARTS.values()} - bases(cls) == {"GangContract", "NodeFailureContract"}
