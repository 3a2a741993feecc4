"""Package facades that load their names on first use (PEP 562).

``hetflow.spec``, ``plan``, ``execute`` and ``report`` each list where their public names
live; importing the package imports none of those modules, so a command pays only for what
it touches (``hetflow run`` on one machine does not load the cluster files' models, the
virtual-cluster search or CP-SAT).  Type checkers see the names through each package's
``if TYPE_CHECKING:`` imports.

An import runs with Python's cycle collector paused (``no_cyclic_gc``): a module makes
thousands of objects (classes, functions, pydantic schemas) that live as long as the process.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Python's cycle collector paused for the block, resumed after as it was: an import, or
    a parse (``hetflow.spec``; a kept parse unpickled), or a planner's passes allocate many
    objects and free almost none (a 10,000-step file: a million), so the collector would walk
    the growing heap again and again for nothing (40% of loading that file, a tenth of
    ``hetflow validate``'s or ``plan``'s CPU time in their imports).

    On the way out every tracked object is moved to the oldest generation (``gc.freeze``
    then ``gc.unfreeze``, a splice of lists, no traversal): left in the youngest, the
    objects made meanwhile were all walked by the first young collection after it (a quarter
    of a second for that file), only to be moved there anyway; they stay collectable by the
    full collections, as any long-lived object."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        if was:
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
        with no_cyclic_gc():
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *names])

    return __getattr__, __dir__
