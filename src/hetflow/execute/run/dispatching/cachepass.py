"""The cross-run cache at the runner's turn: every ready step with a sound entry taken in one
pass, recorded in one transaction (issue 26: a cached rerun of 10,000 steps in seconds).

The runner's loop calls ``CachePass.run`` before its schedule.  It walks the steps in the
runner's order once; a step is a candidate as the schedule would launch it (pending or
waiting, not in flight, its backoff over, every upstream step succeeded) and is looked up
with the variant the dispatch decides for it now.  A step that is taken counts as succeeded
for the rest of the pass, its outputs standing in for the store's, so a chain or a gather
after a fan-out is taken in the same pass.  The steps taken are recorded together
(``Store.cache_steps``: the same rows and events ``cache_step`` writes for one, in a
transaction every ``FLUSH_EVERY`` steps), so the store's commits do not grow with the steps.

What the pass leaves is the schedule's, as before: a step with a ``when`` condition, a fan-out
waiting for its list, a step that waits for resources or fits nowhere (the schedule says
why), and every miss.  A miss is remembered (``known_miss``) so that the schedule launches it
without looking again until this run adds an entry; a damaged entry is said once, then the
step runs.  A pass is skipped without reading the store when every step is looked up, taken
or ended, and when nothing could be new (no step added or succeeded, no entry added since
the last pass), so a run that misses pays no second walk of its steps a turn.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from hetflow.execute.backends.base import Backend
from hetflow.execute.data.cache import ResultCache
from hetflow.execute.data.cachekey import Key, StepKeys
from hetflow.execute.data.fencing import FENCE, NOBODY, grant
from hetflow.execute.data.paths import RunPaths
from hetflow.execute.data.watch import DataWatch, data_refs
from hetflow.execute.run.attempts import Attempts
from hetflow.execute.run.dispatching.decisions import Shape, shape
from hetflow.execute.run.dispatching.dispatch import Dispatch
from hetflow.execute.run.retries import NextAttempt, adjusted
from hetflow.spec import Step, Workflow, pending_source
from hetflow.state import (
    DATA_CHANGED,
    FAILED,
    PENDING,
    STEP_TERMINAL,
    SUCCEEDED,
    WAITING,
    CachedResult,
    CacheEntry,
    InputsSeen,
    Note,
    OutputRecord,
    StepRecord,
    Store,
    disk_full_message,
    is_full,
)

FLUSH_EVERY = 1000  # steps recorded per transaction: a stop midway loses at most these (they are taken again)


class CachePass:
    """Takes ready steps' results from the cross-run cache (``cache``; None: no cache)."""

    def __init__(
        self,
        *,
        store: Store,
        run_id: str,
        cache: ResultCache | None,
        backend: Backend,
        paths: RunPaths,
        watch: DataWatch,
        attempts: Attempts,
        clock: Callable[[], float],
    ) -> None:
        self.store, self.run_id, self.cache, self.backend = store, run_id, cache, backend
        self.paths, self.watch, self.attempts, self.clock = paths, watch, attempts, clock
        self.generation = 0  # entries this run added to the cache (``saved``): a miss may hit now
        self._missed: dict[str, tuple[str, int]] = {}  # step -> (variant, generation) looked up in vain
        # (step, variant, its data digests) -> its key, once known
        self._keys: dict[tuple[str, str, tuple[tuple[str, str], ...]], Key | None] = {}
        self._seen: tuple[int, int, int] | None = None  # (steps, succeeded, generation) at the last pass
        self._settled: set[str] = set()  # steps the pass has no more to do with: ended, taken, not cached
        self._image_ids: dict[str, str | None] = {}
        self._taken: dict[str, list[OutputRecord]] = {}  # outputs of the steps taken, not yet in the store
        self._pending: list[CachedResult] = []
        # Entries found in this pass, by key: a fan-out's items share a few keys (one entry
        # read per key, not per item); an entry found damaged is forgotten with the store's row.
        self._found: dict[str, CacheEntry] = {}

    # --- keys ---------------------------------------------------------------------------

    def saved(self) -> None:
        """This run added an entry to the cache: a step looked up in vain may hit now."""
        self.generation += 1

    def known_miss(self, name: str, vname: str) -> bool:
        """The step was looked up with this variant in vain, and no entry was added since."""
        return self._missed.get(name) == (vname, self.generation)

    def key(self, wf: Workflow, name: str, vname: str, seen: Mapping[str, str] | None = None) -> Key | None:
        """The step's cache key, or None when it is not cached (``cache: false``, the run's
        --no-cache, or an image or input whose content cannot be known).  Its data inputs are
        as they are now (``DataWatch.look``), or as an attempt's launch found them (``seen``).
        A key that could be computed is kept: what else it holds (upstream outputs recorded,
        image identities asked once a run) does not change during the run."""
        if self.cache is None or not wf.steps[name].cache:
            return None
        if seen is None and data_refs(wf.steps[name]):
            look = self.watch.look(wf.steps[name])
            seen = look.digests if look is not None else None
        memo = (name, vname, tuple(sorted((seen or {}).items())))
        if memo in self._keys:
            return self._keys[memo]
        key = self._keys_of(wf, name, vname, seen)
        if key is not None:
            self._keys[memo] = key
        return key

    @property
    def _keys_of(self) -> StepKeys:
        return StepKeys(
            identity=self.image_identity,
            outputs_of=self._outputs_of,
            out_dir=self.paths.step_out,
            data=self.watch.manifest,
            secrets_root=self.store.path.parent,
        )

    def image_identity(self, image: str) -> str | None:
        """The image's content identity: the digest it is pinned to, else the engine's image
        ID, asked once per run (a rebuild during the run is seen by the next run)."""
        if "@sha256:" in image:
            return image.rsplit("@", 1)[1]
        if image not in self._image_ids:
            self._image_ids[image] = self.backend.image_id(image)
        return self._image_ids[image]

    def _outputs_of(self, step: str) -> list[OutputRecord]:
        taken = self._taken.get(step)
        return taken if taken is not None else self.store.outputs(self.run_id, step)

    # --- the pass -----------------------------------------------------------------------

    def run(
        self,
        wf: Workflow,
        order: list[str],
        dispatch: Dispatch,
        nexts: Mapping[str, NextAttempt],
        active: Collection[str],
    ) -> int:
        """Take every ready step that has a sound entry; returns how many were taken."""
        if self.cache is None:
            return 0
        open_ = [n for n in order if n not in self._settled and n not in self._missed]
        if not open_ or not self._changed():
            return 0  # every step looked up, taken or ended already: the store is not read
        steps = {s.step: s for s in self.store.steps(self.run_id)}
        self._found.clear()  # what another process dropped since the last pass is not found again
        now = self.clock()
        taken = 0
        decided: dict[Shape, str | None] = {}
        try:
            for name in open_:
                s = steps[name]
                if s.state in STEP_TERMINAL or not wf.steps[name].cache or wf.steps[name].when is not None:
                    self._settled.add(name)  # never the pass's again
                    continue
                if not self._ready(wf, name, s, steps, active, now) or name in self._missed:
                    continue
                vname = self._variant(wf, name, dispatch, nexts, decided)
                if vname is None:
                    continue  # waits for resources or fits nowhere: the schedule records why
                state = self.take(wf, name, vname)
                if state is not None:
                    steps[name] = self._as_recorded(s, state, vname)
                    self._settled.add(name)
                    taken += state == SUCCEEDED
        finally:
            self.flush()
        return taken

    def _changed(self) -> bool:
        """Whether a step may have become ready to take since the last pass: steps added (a
        fan-out expanded), steps succeeded, or entries added."""
        steps, succeeded = self.store.progress_counts(self.run_id)
        seen = (steps, succeeded, self.generation)
        if seen == self._seen:
            return False
        self._seen = seen
        return True

    @staticmethod
    def _variant(
        wf: Workflow,
        name: str,
        dispatch: Dispatch,
        nexts: Mapping[str, NextAttempt],
        decided: dict[Shape, str | None],
    ) -> str | None:
        """The variant the dispatch decides for the step now; items of one fan-out alike
        (``decisions.shape``) get one answer in a pass: the machine's free capacity does not
        change while the pass takes steps.  A retry's adjusted step is decided alone."""
        step = wf.steps[name]
        key = None if name in nexts else shape(name, step, dispatch)
        if key is None:
            return dispatch.decide(name, adjusted(step, nexts.get(name))).variant
        if key not in decided:
            decided[key] = dispatch.decide(name, step).variant
        return decided[key]

    @staticmethod
    def _ready(
        wf: Workflow, name: str, s: StepRecord, steps: Mapping[str, StepRecord], active: Collection[str], now: float
    ) -> bool:
        step = wf.steps[name]
        if s.state not in (PENDING, WAITING) or name in active or not step.cache:
            return False
        if step.when is not None or pending_source(step) is not None:
            return False  # the schedule's: a condition to evaluate, a list to wait for
        if s.not_before and s.not_before > now:
            return False
        return all(steps[d].state == SUCCEEDED for d in step.dependencies())

    def take(self, wf: Workflow, name: str, vname: str) -> str | None:
        """Take the step's result from the cache, to be recorded (``flush``) with the pass's
        others: SUCCEEDED; FAILED when its cached outputs could not be published (recorded
        now, with why); None when there is no sound entry."""
        key = self.key(wf, name, vname)
        if key is None or self.cache is None:
            return None
        entry = self._found.get(key.digest) or self.cache.lookup(key)
        if entry is None:
            self._missed[name] = (vname, self.generation)
            return None
        self._found[key.digest] = entry
        out = self.paths.step_out_text(name)  # a string: pathlib's objects cost more than the calls
        if os.path.exists(os.path.join(os.path.dirname(out), FENCE)):
            grant(Path(out), NOBODY)  # the cache's result goes in: no attempt of the step may write it now
        records = self.cache.restore(entry, self.run_id, name, out, touch=False)
        if records is None:
            self._found.pop(key.digest, None)
            self.attempts.emit(
                Note(0, self.run_id, self.clock(), f"cache entry {key.digest[:12]} was damaged; running", name, "cache")
            )
            self._missed[name] = (vname, self.generation)
            return None
        if wf.steps[name].publish:
            self.flush()  # the store's events stay in the order they happened
            if not self.attempts.publish(name, Path(out)):
                return FAILED
        why = f"cached: from run {entry.run_id} (key {key.digest[:12]})"
        look = self.watch.look(wf.steps[name])
        made_from = tuple(sorted(look.digests.items())) if look is not None else ()
        self._pending.append(CachedResult(name, vname, tuple(records), why, entry.key, self.clock(), made_from))
        self._taken[name] = records
        if len(self._pending) >= FLUSH_EVERY:
            self.flush()
        return SUCCEEDED

    def take_one(self, wf: Workflow, name: str, vname: str) -> bool:
        """Take the step's result from the cache when its key has a sound entry, recorded now
        (most are taken by the turn's ``run`` already; this is for the steps it leaves)."""
        if self.known_miss(name, vname):
            return False
        self._found.clear()
        taken = self.take(wf, name, vname) is not None
        self.flush()
        return taken

    def _as_recorded(self, s: StepRecord, state: str, vname: str) -> StepRecord:
        """The step's row as the pass left it (read back when it failed)."""
        if state != SUCCEEDED:
            return self.store.step(self.run_id, s.step)
        done = self._pending[-1] if self._pending and self._pending[-1].step == s.step else None
        if done is None:  # flushed already
            return self.store.step(self.run_id, s.step)
        t, why = done.time, done.reason
        return dataclasses.replace(s, state=SUCCEEDED, variant=vname, started=t, ended=t, exit_code=0, reason=why)

    def flush(self) -> None:
        """Record the steps taken so far (one transaction)."""
        if self._pending:
            self.store.cache_steps(self.run_id, self._pending)
            self._pending = []
        self._taken.clear()

    # --- a result kept ----------------------------------------------------------------------

    def keep(self, wf: Workflow, name: str, vname: str, attempt: int, records: Sequence[OutputRecord]) -> None:
        """Attempt ``attempt`` of ``name`` succeeded: record what its data inputs were, and
        keep its result under its key for later runs, unless its data files moved while it ran
        (it may have read other bytes than the key says: the user is told, ``hetflow resume``
        runs it again, and nothing is cached)."""
        step = wf.steps[name]
        seen = None
        if data_refs(step):
            seen = self.store.attempt_inputs(self.run_id, name, attempt)
            moved = self._moved(step, seen)
            digests = seen.digests if seen is not None else {}
            self.store.record_result_inputs(self.run_id, [(name, digests, moved)])
            if moved:
                why = f"ran on changed data: {moved}; not cached: it runs again on resume or in the next run"
                self.store.set_attempt(self.run_id, name, attempt, message=why)
                self.store.set_step(self.run_id, name, reason=why)
                self.attempts.emit(Note(0, self.run_id, self.clock(), f"{name} {why}", name, DATA_CHANGED))
                return
        key = self.key(wf, name, vname, seen.digests if seen is not None else None)
        if key is None or self.cache is None:
            return
        try:
            self.cache.save(key, workflow=wf.name, step=name, run_id=self.run_id, records=records)
            self.saved()
        except OSError as exc:  # the step's result stands; only the cache lacks it
            if not is_full(exc):
                raise
            why = f"result not kept in the cache: {disk_full_message(self.cache.root)}"
            self.attempts.emit(Note(0, self.run_id, self.clock(), why, name, "cache"))

    def _moved(self, step: Step, seen: InputsSeen | None) -> str:
        """What moved under the step's data inputs since its launch looked ("" when nothing)."""
        if seen is None:
            return "its data inputs were not recorded when it launched"
        moved = self.watch.changed_since(step, seen.fingerprint)
        return ", ".join(moved) + (" changed while it ran" if moved else "")
