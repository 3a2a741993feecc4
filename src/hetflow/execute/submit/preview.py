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
  ``cache: false`` or ``--no-cache``; then why its variant was chosen, in the run's words;
- **skipped**: an optional step no variant of which fits (with why), and what needs it.

Refused as the run refuses: a missing secret (``session.use_secrets``, the same message).
A cached step's outputs stand in for its content when its dependants' keys are computed,
as they do at run time; where a path inside one is read (a fan-out over it, an input of a
file in its folder), its outputs are restored from the cache into a temporary folder, so a
fan-out over a cached step's output is expanded and its items told apart as the run will.
What only the run can know is said as such, never guessed: the items of a fan-out over the
output of a step that runs, GPUs a greedy run takes when free.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hetflow.errors import HetflowError, SpecError
from hetflow.execute.backends.local.engines import make_engine
from hetflow.execute.data.cache import ResultCache
from hetflow.execute.data.cachekey import StepKeys
from hetflow.execute.data.fanout import expand_at_submit, read_items
from hetflow.execute.data.inputs import (
    S3,
    DataManifest,
    ObjectStore,
    resolve_data,
    s3_filesystem,
)
from hetflow.execute.secrets import active
from hetflow.execute.settings import Settings
from hetflow.execute.submit.pin import Resolver, default_resolver, pin_images
from hetflow.execute.submit.prepare import plan_on_cluster, plan_on_node
from hetflow.execute.submit.record import preflight
from hetflow.execute.submit.runplan import RunPlan
from hetflow.execute.submit.session import use_secrets
from hetflow.inventory import Node
from hetflow.plan import can_run_here
from hetflow.spec import (
    DATA_PREFIX,
    SKIPPED_BY_CONDITION,
    LoadedWorkflow,
    Step,
    edges_of,
    evaluate,
    expand,
    fanout_parent,
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
    the real one).  A missing secret is refused first, as ``hetflow run`` refuses it."""
    use_secrets(loaded.workflow, settings)
    manifest = resolve_data(loaded, memo=store, s3=s3).listed()
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
    with tempfile.TemporaryDirectory(prefix="hetflow-dry-run-") as restored:
        walk = _Walk(loaded, plan, node, settings, manifest, s3_sets, cache, local_id, Path(restored))
        steps = walk.all()
    makespan = plan.plan.makespan if plan.plan is not None else None
    return Preview(loaded.workflow.name, settings.backend, steps, pulls, notes, makespan)


def _unknown(_image: str) -> str | None:
    return None


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
        restored: Path,
    ) -> None:
        self.wf = loaded.workflow
        self.plan, self.node, self.settings = plan, node, settings
        self.manifest, self.s3_sets, self.cache, self.image_id = manifest, s3_sets, cache, image_id
        self.status: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        self.outputs: dict[str, list[OutputRecord]] = {}  # a cached step's outputs, from its entry
        self.entries: dict[str, Any] = {}  # a cached step's cache entry
        self.restored = restored  # cached steps' outputs put back where the run would read them

    def all(self) -> tuple[StepPreview, ...]:
        """Every step in the DAG's order; a fan-out over a cached step's output is expanded
        from that output, as the run will expand it, and its items told apart one by one."""
        order, out, i = topo_order(edges_of(self.wf)), [], 0
        while i < len(order):
            items = self._cached_items(order[i])
            if items is not None:
                self.wf, _ = expand(self.wf, {order[i]: items}, self.wf.name, lambda _loc: 0)
                done = set(order[:i])
                order = order[:i] + [n for n in topo_order(edges_of(self.wf)) if n not in done]
                continue
            out.append(self.step(order[i]))
            i += 1
        return tuple(out)

    def _cached_items(self, name: str) -> list[Any] | None:
        """The items of a fan-out over a cached step's output, read from the cache as the run
        reads them from the restored output; None for any other step or an unreadable list."""
        src = pending_source(self.wf.steps[name])
        if src is None or src.step is None or self.status.get(src.step) != CACHED:
            return None
        try:
            return read_items(src, self._out_dir(src.step))
        except (OSError, HetflowError):
            return None

    def _out_dir(self, step: str) -> Path:
        """A cached step's outputs, restored from the cache once (a path inside a directory
        output is then hashed as the run hashes it); a nonexistent folder for any other."""
        target = self.restored / step
        entry = self.entries.get(step)
        if entry is None or self.cache is None:
            return _nowhere(step)
        if not target.exists() and self.cache.restore(entry, "dry-run", step, target, touch=False) is None:
            return _nowhere(step)
        return target

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
        if status == RUNS and (chosen := self._variant_why(name, vname)):
            why = f"{why}; {chosen}"
        return self._say(name, status, vname, where, gpus, estimate, why, key, run)

    def _variant_why(self, name: str, vname: str) -> str:
        """Why the variant that runs was chosen, in the run's words (``choose.Planned``):
        the plan's reason, or the first variant that fits when no plan chose one."""
        reason = self.plan.reasons.get(name) or self.plan.reasons.get(fanout_parent(name) or "")
        if reason:
            return f"{vname}: planned ({reason})"
        if not vname or len(self.wf.steps[name].resolved_variants()) < 2:
            return ""
        return f"{vname}: the first variant that fits {'here' if self.settings.leases_here else 'a node'}"

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
        placements = self.plan.plan.placements if self.plan.plan is not None else {}
        # an item of a fan-out expanded here runs as its step was planned
        placement = placements.get(name) or placements.get(fanout_parent(name) or "")
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
            out_dir=self._out_dir,
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
        self.entries[name] = entry
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
