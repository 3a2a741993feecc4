"""``hetflow validate``'s run-time checks: everything ``hetflow run`` would refuse on this
machine, all at once (data, fan-outs over data, images, secrets, whether a variant fits)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

from hetflow.errors import HetflowError, NoFitError, Problem, SpecError
from hetflow.execute.backends.local.engines import make_engine
from hetflow.execute.data.fanout import expand_at_submit
from hetflow.execute.data.inputs import ObjectStore, resolve_data, s3_filesystem
from hetflow.execute.secrets import gather_available
from hetflow.execute.submit.pin import Resolver, default_resolver, pin_images
from hetflow.execute.submit.record import preflight
from hetflow.images import NotFoundError, ResolveResult, parse_reference
from hetflow.inventory import Node
from hetflow.spec import LoadedWorkflow
from hetflow.state import Store


def check_run(
    store: Store,
    loaded: LoadedWorkflow,
    node: Node,
    *,
    offline: bool = False,
    engine: Any = None,
    resolver: Resolver = default_resolver,
    s3: Callable[[str | None], ObjectStore] = s3_filesystem,
) -> list[Problem]:
    """``hetflow validate``: everything ``hetflow run`` would refuse on this machine, all at
    once (a run stops at the first stage that fails): the workflow's notes, data paths and
    globs, S3 prefixes, fan-outs over data, images (present here, or resolvable to a build for
    this machine), and whether a variant of every step fits.  ``offline``: nothing is asked of
    the network (S3, registries); what is left unchecked is said in a note."""
    problems: list[Problem] = list(loaded.notes)
    unchecked: list[str] = []
    if offline:
        unchecked += [f"data {n!r} ({ds.url})" for n, ds in loaded.workflow.data.items() if ds.is_s3]
        loaded = dataclasses.replace(loaded, workflow=_without_s3(loaded))
    try:
        manifest = resolve_data(loaded, memo=store, s3=s3).listed()
        loaded, _ = expand_at_submit(loaded, manifest)
    except SpecError as exc:
        problems += exc.problems
    except HetflowError as exc:  # a fan-out over data that cannot be read
        problems.append(Problem(loaded.file, 1, str(exc)))
    try:
        engine = engine or make_engine()
    except HetflowError as exc:
        unchecked.append(f"images (no container engine: {exc})")
        engine = None
    if engine is not None:
        images = _ImageCheck(loaded, offline, resolver)
        try:
            pinned = pin_images(loaded.workflow, node, images.resolve)
            loaded, pulls = dataclasses.replace(loaded, workflow=pinned.workflow), pinned.pulls
        except NoFitError as exc:
            problems.append(Problem(loaded.file, 1, str(exc)))
            pulls = []
        problems += images.problems
        unchecked += images.unchecked
        pulls = [*pulls, *images.left]
    else:
        pulls = []
    problems += preflight(loaded, node, engine, pulled=pulls) + _secrets_unset(loaded)
    if unchecked:
        what = "; ".join(unchecked)
        problems.append(Problem(loaded.file, 1, f"not checked {'offline' if offline else 'here'}: {what}", "note"))
    return sorted(_unique(problems), key=lambda p: (p.file, p.line))  # in the file's order


def _secrets_unset(loaded: LoadedWorkflow) -> list[Problem]:
    """A note for each secret this environment (or HETFLOW_SECRETS_FILE) lacks: run refuses it
    unless it is given then (a check in CI has no values, so not an error)."""
    steps = loaded.workflow.steps
    have = gather_available({n for s in steps.values() for n in s.secrets}, os.environ).values
    return [
        Problem(
            loaded.file,
            loaded.line("steps", name, "secrets"),
            f"step {name!r}: secret {secret!r} is not set here; hetflow run needs it in its environment or in"
            " --secrets-file FILE",
            "note",
        )
        for name, step in steps.items()
        for secret in step.secrets
        if secret not in have
    ]


def _without_s3(loaded: LoadedWorkflow) -> Any:
    data = {n: ds for n, ds in loaded.workflow.data.items() if not ds.is_s3}
    return loaded.workflow.model_copy(update={"data": data})


def _unique(problems: list[Problem]) -> list[Problem]:
    """Each problem once (the notes of loading come back from preflight's feasibility)."""
    seen: set[tuple[str, int, str, str]] = set()
    out = []
    for p in problems:
        key = (p.file, p.line, p.message, p.severity)
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


class _ImageCheck:
    """A resolver for ``pin_images`` that records a registry's refusal as the image's problem
    (with the line of its first use) and goes on, so every image is reported in one pass."""

    def __init__(self, loaded: LoadedWorkflow, offline: bool, resolver: Resolver) -> None:
        self.loaded, self.offline, self.resolver = loaded, offline, resolver
        self.problems: list[Problem] = []
        self.unchecked: list[str] = []
        self.left: list[str] = []  # registry images left as written: not the local store's to hold

    def resolve(self, image: str, node: Node) -> ResolveResult | None:
        """The image's builds, or None (left as written) where its registry is not asked
        (offline) or refused (the problem is recorded)."""
        if self.offline and not parse_reference(image).local:
            self.unchecked.append(f"image {image} (a registry)")
            self.left.append(image)
            return None
        try:
            return self.resolver(image, node)
        except NotFoundError:
            if parse_reference(image).local:
                raise  # pin_images leaves a missing local image to preflight, which names its line
            self._refused(image, f"image {image!r} was not found in its registry; check the name and tag")
        except HetflowError as exc:
            self._refused(image, f"image {image!r}: {exc}")
        self.left.append(image)
        return None

    def _refused(self, image: str, message: str) -> None:
        self.problems.append(Problem(self.loaded.file, _image_line(self.loaded, image), message))


def _image_line(loaded: LoadedWorkflow, image: str) -> int:
    """The line of the first step (or variant) that names ``image``."""
    for sname, step in loaded.workflow.steps.items():
        for vname, v in step.resolved_variants().items():
            if v.image == image:
                loc = ("steps", sname, "variants", vname, "image") if step.variants else ("steps", sname, "image")
                return loaded.line(*loc)
    return 1
