"""A task's GPUs on this machine: what its ``backend_parameters`` ask (``gpu_count``,
``gpu_min_memory``, ``gpu_compute_capability`` as a minimum, ``gpu_model`` as a word of the
model's name), which of the inventory's GPUs could ever serve it (none: the task cannot run
here, and the reason says why), and which free ones it gets now: leased in the store as any
hetflow step's are, so two tasks (or a task and a hetflow run) never hold one GPU at once."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hetflow.execute import Backend, container_name
from hetflow.inventory import Gpu, Node
from hetflow.spec import parse_memory
from hetflow.state import Lease, Store, pid_alive

GPU_COUNT = "gpu_count"  # whole GPUs, e.g. "1"
GPU_MIN_MEMORY = "gpu_min_memory"  # e.g. "16Gi"
GPU_COMPUTE_CAPABILITY = "gpu_compute_capability"  # minimum, e.g. "8.0"
GPU_MODEL = "gpu_model"  # e.g. "a100"
GPU_KEYS = (GPU_COUNT, GPU_MIN_MEMORY, GPU_COMPUTE_CAPABILITY, GPU_MODEL)
LEASE_STEP = "exec-0"  # a task's lease is held in its first executor's name, for the whole task


class BadAsk(ValueError):
    """A GPU parameter that does not parse: the message names it and what to give."""


@dataclass(frozen=True)
class GpuAsk:
    count: int
    min_memory: int = 0
    compute_capability: tuple[int, int] | None = None
    model: str = ""

    def describe(self) -> str:
        parts = [f"{self.count} GPU{'s' if self.count != 1 else ''}"]
        if self.model:
            parts.append(f"model {self.model!r}")
        if self.compute_capability:
            parts.append("compute capability >= {}.{}".format(*self.compute_capability))
        if self.min_memory:
            parts.append(f"memory >= {self.min_memory / 2**30:g} GiB")
        return ", ".join(parts)


def parse_ask(params: Mapping[str, str]) -> GpuAsk | None:
    """The GPUs asked by lowercased ``params`` (None: none); any GPU key without a count asks one."""
    if not any(k in params for k in GPU_KEYS):
        return None
    where = "resources.backend_parameters"
    try:
        count = int(params.get(GPU_COUNT, "1"))
    except ValueError:
        raise BadAsk(f"{where}.{GPU_COUNT}: {params[GPU_COUNT]!r} is not a whole number") from None
    if count < 0:
        raise BadAsk(f"{where}.{GPU_COUNT} must be 0 or more")
    memory = 0
    if GPU_MIN_MEMORY in params:
        try:
            memory = parse_memory(params[GPU_MIN_MEMORY])
        except (ValueError, TypeError) as exc:
            raise BadAsk(f"{where}.{GPU_MIN_MEMORY}: {params[GPU_MIN_MEMORY]!r}: {exc} (e.g. 16Gi)") from None
    cc = None
    if GPU_COMPUTE_CAPABILITY in params:
        m = re.fullmatch(r"\s*(\d+)\.(\d+)\s*", params[GPU_COMPUTE_CAPABILITY])
        if m is None:
            raise BadAsk(
                f"{where}.{GPU_COMPUTE_CAPABILITY}: {params[GPU_COMPUTE_CAPABILITY]!r} is not MAJOR.MINOR (e.g. 8.0)"
            )
        cc = (int(m.group(1)), int(m.group(2)))
    if count == 0:
        return None
    return GpuAsk(count, memory, cc, params.get(GPU_MODEL, "").strip().lower())


def serves(g: Gpu, ask: GpuAsk) -> bool:
    if g.mig_enabled:
        return False  # MIG GPUs are given out by instance, which TES cannot ask for
    if ask.model and ask.model not in g.model.lower().replace("-", " ").split() and ask.model not in g.model.lower():
        return False
    if ask.compute_capability and (not g.compute_capability or g.compute_capability_tuple < ask.compute_capability):
        return False
    return g.memory_bytes >= ask.min_memory


def unservable(node: Node, ask: GpuAsk) -> str:
    """Why no GPU of ``node`` can ever serve ``ask`` ("" when enough can)."""
    fit = [g for g in node.gpus if serves(g, ask)]
    if len(fit) >= ask.count:
        return ""
    have = "; ".join(
        f"{g.index}: {g.model}, {g.memory_bytes / 2**30:g} GiB, CC {g.compute_capability or '?'}" for g in node.gpus
    )
    return (
        f"no GPU here can serve this task: it asks {ask.describe()}; {len(fit)} of this machine's GPUs fit "
        f"({have or 'it has none'})"
    )


def live_leases(store: Store, backend: Backend) -> list[Lease]:
    """The leases whose holder lives (this server, another hetflow process) or whose container runs."""
    own = os.getpid()
    out = []
    for lease in store.leases():
        if lease.pid == own or pid_alive(lease.pid):
            out.append(lease)
            continue
        st = backend.poll(lease.run_id).get(lease.container)
        if st is not None and st.running:
            out.append(lease)
    return out


def lease(store: Store, backend: Backend, node: Node, ask: GpuAsk, run_id: str) -> tuple[Gpu, ...] | None:
    """Free GPUs serving ``ask`` leased to the task's run (all or none); None: not enough free now."""
    leases = store.leases()
    live = live_leases(store, backend)
    held = {x.gpu_uuid for x in live}
    free: Sequence[Gpu] = [g for g in node.gpus if serves(g, ask) and g.uuid not in held]
    if len(free) < ask.count:
        return None
    chosen = tuple(sorted(free, key=lambda g: (g.memory_bytes, g.index))[: ask.count])  # the smallest that fit
    name = container_name(run_id, LEASE_STEP, 1)
    holder = Lease("", run_id, LEASE_STEP, 1, name, os.getpid())
    stale = [x for x in leases if x not in live]
    return chosen if store.acquire_gpus([g.uuid for g in chosen], holder, stale) else None


def release(store: Store, run_id: str) -> None:
    store.release_gpus(container_name(run_id, LEASE_STEP, 1))
