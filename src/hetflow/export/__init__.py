"""Exporters: a plan written out for an engine hetflow does not drive.

A backend (``hetflow.execute.backends``) runs a plan and watches it; an exporter only
translates one planned run into the engine's own objects and hands them to the user,
who submits them with the engine's tools (``kubectl create -f``).  hetflow neither
submits nor watches them, so an exporter has no state and does no I/O: it is a pure
function of (workflow, cluster, plan, run ID) plus a renderer and, where the engine
publishes a schema, a validator.

Exporters today: ``kubernetes`` (``export_kubernetes``, ``to_yaml``, ``validate_objects``).

Adding one (say ``nomad``): make a package ``export/nomad/`` whose ``__init__`` states its
public names in ``__all__`` and keeps its helpers in private ``_modules``; build the
objects from ``hetflow.plan`` and ``hetflow.spec`` values only, and import the engine's
client lazily (only to validate); add it to ``__all__`` below; add a ``hetflow export nomad``
command in ``hetflow.cli.planning.plan`` and golden-file tests like ``tests/unit/test_kubernetes.py``.
"""

from hetflow.export import kubernetes

__all__ = ["kubernetes"]
