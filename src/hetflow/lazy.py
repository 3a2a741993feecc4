"""Package facades that load their names on first use (PEP 562).

``hetflow.spec``, ``plan``, ``execute`` and ``report`` each list where their public names
live; importing the package imports none of those modules, so a command pays only for what
it touches (``hetflow run`` on one machine does not load the cluster files' models, the
virtual-cluster search or CP-SAT).  Type checkers see the names through each package's
``if TYPE_CHECKING:`` imports.

An import runs with Python's cycle collector paused (``importing``): a module makes
thousands of objects (classes, functions, pydantic schemas) that live as long as the process,
and the collector walked the growing heap again and again for nothing (a tenth of the CPU
time of ``hetflow validate`` or ``plan``).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any


@contextlib.contextmanager
def importing() -> Iterator[None]:
    """The cycle collector paused while modules are imported, resumed after as it was; what
    was made meanwhile is moved to the oldest generation (``gc.freeze`` then ``gc.unfreeze``,
    a splice of lists: no traversal), where it stays collectable by the full collections, as
    any long-lived object (``hetflow.spec``'s ``no_cyclic_gc`` does the same for a parse)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.freeze()
            gc.unfreeze()
            gc.enable()


def lazy_names(
    package: str, where: Mapping[str, Sequence[str]], names: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The package's module-level ``__getattr__`` and ``__dir__``: ``where`` maps each of
    its modules to the names it provides; a name is imported once, then kept in the
    package's namespace."""
    module_of = {name: module for module, provided in where.items() for name in provided}
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        with importing():
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *names])

    return __getattr__, __dir__
