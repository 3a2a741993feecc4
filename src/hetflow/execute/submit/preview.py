"""What a run would do, without doing it: ``hetflow run --dry-run`` (Nextflow's ``-preview``,
Snakemake's ``-n``).

The workflow goes through what submitting does (data resolved, fan-outs over data expanded,
images resolved to the build for this machine, the checks that refuse a run, the plan), but
nothing is fetched, pulled, started or recorded as a run.  Then every step, in the DAG's
order, is told apart as the runner would at its turn:

- **cached**: its cache key (``data.cache``) can be computed now and the cross-run cache
  holds a sound entry for it: the run takes the result from there (from which run, which
  key);
- **runs**: no entry, or the key cannot be known before the run: an input comes from a
  step that runs, S3 data is hashed only once downloaded, the image is not here yet,
  ``cache: false`` or ``--no-cache``;
- **skipped**: an optional step no variant of which fits (with why), and what needs it.

A cached step's outputs stand in for its content when its dependants' keys are computed,
as they do at run time.  What only the run can know is said as such, never guessed: the
items of a fan-out over an upstream step's output, GPUs a greedy run takes when free.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetflow.errors import HetflowError, NoFitError, Problem, SpecError
from hetflow.execute.backends.local.engines import make_engine
from hetflow.execute.data.cache import ResultCache, StepKeys
from hetflow.execute.data.fanout import expand_at_submit
from hetflow.execute.data.inputs import (
    S3,
    DataFile,
    DataManifest,
    DataPlan,
    DataSetFiles,
    ObjectStore,
    resolve_data,
    s3_filesystem,
)
from hetflow.execute.secrets import active, gather_available
from hetflow.execute.settings import Settings
from hetflow.execute.submit.pin import Resolver, default_resolver, pin_images
from hetflow.execute.submit.prepare import plan_on_cluster, plan_on_node
from hetflow.execute.submit.record import preflight
from hetflow.execute.submit.runplan import RunPlan
from hetflow.images import NotFoundError, ResolveResult, parse_reference
from hetflow.inventory import Node
from hetflow.plan import can_run_here
from hetflow.spec import (
    DATA_PREFIX,
    SKIPPED_BY_CONDITION,
    LoadedWorkflow,
    Step,
    edges_of,
    evaluate,
    output_refs,
    pending_source,
    topo_order,
)
from hetflow.state import OutputRecord, Store

RUNS, CACHED, SKIPPED = "runs", "cached", "skipped"


@dataclass(frozen=True)
class StepPreview:
    step: str
    status: str  # runs | cached | skipped
    variant: str  # the variant the plan chose ("" when none fits)
    where: str  # this machine's name, or the planned node class (a cluster run)
    gpus: tuple[int, ...]  # the planned GPU indices (a greedy local run takes free ones at run time)
    estimate: float | None  # seconds, the plan's; None without a plan
    why: str
    key: str = ""  # the cache key's digest, when it can be known now
    from_run: str = ""  # cached: the run that produced the result

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"gpus": list(self.gpus)}


@dataclass(frozen=True)
class Preview:
    workflow: str
    backend: str
    steps: tuple[StepPreview, ...]
    pulls: tuple[str, ...]  # images a run would pull first
    notes: tuple[str, ...]  # what submitting would print as notes (warnings)
    makespan: float | None  # the plan's estimate with every step run (cached ones take ~0)

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for p in self.steps if p.status == s) for s in (RUNS, CACHED, SKIPPED)}

    def run_seconds(self) -> float:
        """The planned seconds of the steps that would run (a sum: parallel steps overlap)."""
        return sum(p.estimate or 0.0 for p in self.steps if p.status == RUNS)

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "backend": self.backend,
            "dry_run": True,
            "steps": [p.to_json() for p in self.steps],
            "totals": {**self.counts(), "steps": len(self.steps), "run_seconds": round(self.run_seconds(), 3)},
            "makespan": self.makespan,
            "pulls": list(self.pulls),
            "notes": list(self.notes),
        }


def preview_run(
    store: Store,
    loaded: LoadedWorkflow,
    settings: Settings,
    node: Node,
    *,
    cache_root: Path,
    engine: Any = None,
    resolver: Resolver = default_resolver,
    s3: Callable[[str | None], ObjectStore] = s3_filesystem,
) -> Preview:
    """What ``hetflow run`` with these settings would do now; SpecError (every problem at
    once) where it would refuse the run.  ``engine``: the local container engine (default:
    the real one)."""
    manifest = _listed(resolve_data(loaded, memo=store, s3=s3))
    loaded, _ = expand_at_submit(loaded, manifest)
    s3_sets = {name for name, ds in manifest.sets.items() if ds.kind == S3}
    if settings.leases_here:
        engine = engine or make_engine()
        pinned = pin_images(loaded.workflow, node, resolver)
        loaded = dataclasses.replace(loaded, workflow=pinned.workflow)
        found = list(loaded.notes) + preflight(loaded, node, engine, pulled=pinned.pulls)
        if any(p.severity == "error" for p in found):
            raise SpecError(found)
        plan = plan_on_node(store, loaded, node, list(pinned.pulls), steer=settings.steer)
        notes = tuple(str(p) for p in found) + tuple(f"note: {n}" for n in pinned.notes)
        local_id: Callable[[str], str | None] = functools.cache(engine.image_id)  # one podman call an image
        pulls = tuple(pinned.pulls)
    else:
        plan = plan_on_cluster(store, loaded, settings, resolver)
        notes, pulls = tuple(str(p) for p in loaded.notes), ()
        local_id = _unknown  # the image a cluster node runs is known there, at run time
    cache = ResultCache(store, cache_root) if settings.cache else None
    walk = _Walk(loaded, plan, node, settings, manifest, s3_sets, cache, local_id)
    steps = tuple(walk.step(name) for name in topo_order(edges_of(loaded.workflow)))
    makespan = plan.plan.makespan if plan.plan is not None else None
    return Preview(loaded.workflow.name, settings.backend, steps, pulls, notes, makespan)


def _unknown(_image: str) -> str | None:
    return None


def _listed(data: DataPlan) -> DataManifest:
    """The workflow data as a run would see it, without downloading: host data hashed, S3
    objects listed (their content unknown: hashed once downloaded)."""
    sets: dict[str, DataSetFiles] = dict(data.host)
    for name, listing in data.s3.items():
        files = tuple(DataFile(rel, "", "", size, url) for rel, url, size in listing)
        sets[name] = DataSetFiles(name, S3, "", files)
    return DataManifest(sets)


class _Walk:
    """The runner's cache decisions, step by step in the DAG's order, without running."""

    def __init__(
        self,
        loaded: LoadedWorkflow,
        plan: RunPlan,
        node: Node,
        settings: Settings,
        manifest: DataManifest,
        s3_sets: set[str],
        cache: ResultCache | None,
        image_id: Callable[[str], str | None],
    ) -> None:
        self.wf = loaded.workflow
        self.plan, self.node, self.settings = plan, node, settings
        self.manifest, self.s3_sets, self.cache, self.image_id = manifest, s3_sets, cache, image_id
        self.status: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        self.outputs: dict[str, list[OutputRecord]] = {}  # a cached step's outputs, from its entry

    def step(self, name: str) -> StepPreview:
        step = self.wf.steps[name]
        vname, where, gpus, estimate = self._placed(name, step)
        skipped = self._skipped(name, step, vname) or self._condition_false(step)
        if skipped:
            return self._say(name, SKIPPED, vname, where, gpus, estimate, skipped)
        status, why, key, run = self._cached(name, step, vname)
        if step.when is not None and output_refs(step.when):
            parents = sorted({r.split("/", 1)[0] for r in output_refs(step.when)})
            why = f"if when: {step.when} (decided once {', '.join(map(repr, parents))} succeeded); {why}"
        return self._say(name, status, vname, where, gpus, estimate, why, key, run)

    def _condition_false(self, step: Step) -> str:
        """The reason a step's params-only ``when:`` skips it ('' when it holds or reads an
        output, which only the run can read)."""
        if step.when is None or output_refs(step.when):
            return ""
        return "" if evaluate(step.when, self.wf.params) else f"{SKIPPED_BY_CONDITION}when: {step.when}"

    def _say(self, name: str, status: str, *args: Any) -> StepPreview:
        preview = StepPreview(name, status, *args)
        self.status[name], self.reasons[name] = status, preview.why
        return preview

    def _placed(self, name: str, step: Step) -> tuple[str, str, tuple[int, ...], float | None]:
        """The plan's variant, place, GPUs and time for the step."""
        placement = self.plan.plan.placements.get(name) if self.plan.plan is not None else None
        if placement is not None:
            where = self.node.name if self.settings.leases_here else placement.machine_class
            return placement.variant, where, placement.gpus, placement.finish - placement.start
        chosen = self.plan.variants.get(name)
        if chosen is None:  # greedy: the first variant that can run here (a GPU one when a GPU fits)
            chosen = next((v for v, o in step.resolved_variants().items() if can_run_here(step, o, self.node)), "")
        return chosen, self.node.name if self.settings.leases_here else "", (), None

    def _skipped(self, name: str, step: Step, vname: str) -> str:
        broken = [d for d in step.dependencies() if self.status.get(d) == SKIPPED]
        if broken:
            why = f"upstream step {broken[0]!r} skipped"
            by_condition = all(self.reasons.get(d, "").startswith(SKIPPED_BY_CONDITION) for d in broken)
            return SKIPPED_BY_CONDITION + why if by_condition else why
        if not vname and step.optional:
            return "optional step: no variant fits " + ("this machine" if self.settings.leases_here else "a node")
        return ""

    def _cached(self, name: str, step: Step, vname: str) -> tuple[str, str, str, str]:
        """(status, why, key, from run) for a step that is not skipped."""
        if not self.settings.cache:
            return RUNS, "--no-cache", "", ""
        if not step.cache:
            return RUNS, "cache: false", "", ""
        src = pending_source(step)
        if src is not None and src.step is not None:
            return RUNS, f"a fan-out over {src.ref}: its items are known when {src.step!r} has succeeded", "", ""
        # only inputs enter the key: a parent named in needs (or by a condition) alone does not
        sources = {r.split("/", 1)[0] for r in step.inputs.values() if not r.startswith(DATA_PREFIX)}
        ran = [d for d in step.dependencies() if d in sources and self.status.get(d) == RUNS]
        if ran:
            return RUNS, f"its input comes from {ran[0]!r}, which runs", "", ""
        s3 = [r for r in step.inputs.values() if r.startswith(DATA_PREFIX) and _data_set(r) in self.s3_sets]
        if s3:
            why = f"reads S3 data ({s3[0]}): its content is hashed once downloaded, the cache checked then"
            return RUNS, why, "", ""
        variant = step.resolved_variants().get(vname)
        if variant is None:
            return RUNS, "no variant chosen before the run", "", ""
        image = variant.image
        identity = image.rsplit("@", 1)[1] if "@sha256:" in image else self.image_id(image)
        if identity is None and not self.settings.leases_here:
            why = f"the image's identity is read on {self.settings.backend} at run time, the cache checked then"
            return RUNS, why, "", ""
        if identity is None:
            return RUNS, f"image {image} is not here yet: its identity is known once pulled", "", ""
        unset = [n for n in step.secrets if n not in active().values]
        if unset:
            return RUNS, f"secret {unset[0]} is not set here: the cache is looked up at run time", "", ""
        if self.cache is None:
            return RUNS, "no cache", "", ""
        keys = StepKeys(
            identity=lambda _image: identity,
            outputs_of=lambda p: self.outputs.get(p, []),
            out_dir=_nowhere,
            data=self.manifest,
            secrets_root=self.cache.root.parent,
        )
        key = keys(self.wf, name, vname)
        if key is None:
            return RUNS, "an input's content cannot be known before the run", "", ""
        entry = self.cache.lookup(key)
        if entry is None:
            return RUNS, f"not in the cache (key {key.digest[:12]})", key.digest, ""
        self.outputs[name] = _records(entry.outputs_json, name)
        return CACHED, f"cached: from run {entry.run_id} (key {key.digest[:12]})", key.digest, entry.run_id


def _data_set(ref: str) -> str:
    return ref[len(DATA_PREFIX) :].split("/", 1)[0]


def _nowhere(_step: str) -> Path:
    """A cached step's files are not in place before the run: a path inside one of its
    directory outputs cannot be hashed (input_digests then says unknown)."""
    return Path("/nonexistent/hetflow-dry-run")


def _records(outputs_json: str, step: str) -> list[OutputRecord]:
    """A cache entry's outputs as the records a run would store once it took them."""
    out: list[Mapping[str, Any]] = json.loads(outputs_json)
    return [OutputRecord("", step, o["name"], o["sha256"], o["size"], "") for o in out]


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
        manifest = _listed(resolve_data(loaded, memo=store, s3=s3))
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
