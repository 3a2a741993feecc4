"""Who holds which part of this machine's GPUs, and whether one more tenant fits: the lease
arithmetic of the local runner, pure (the store keeps the rows, ``execute.dispatch``
reads them into ``Tenant`` values and asks ``admits`` inside the store's transaction).

A GPU is held one of four ways (``Tenant.mode``):

- ``whole``: one container has it; nobody else may take any part of it.
- ``time-slicing``: up to ``GpuSharing.replicas`` containers take turns on it (as the
  NVIDIA device plugin's time-slicing replicas: their shares are not summed, only counted).
- ``mps``: up to ``replicas`` MPS clients run at once, and their shares (each held to its
  share of the SMs by CUDA_MPS_ACTIVE_THREAD_PERCENTAGE) sum to at most 1.
- ``mig``: one MIG instance (by its ``MIG-...`` uuid) of a GPU in MIG mode; instances of
  one GPU are isolated in hardware, so each is a lease of its own.  A GPU in MIG mode is
  never given whole nor shared.

A whole holder excludes tenants and tenants exclude a whole holder.  The rules are those of
``model.gpu_refusals``; ``admits`` reads the GPU's live leases as a ``GpuState`` and says the
first reason in words.  (The leases do not know whether a GPU is in MIG mode: the chooser
offers only the instances of a GPU in MIG mode, and only the other GPUs whole or shared.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hetflow.inventory import Gpu, GpuSharing, MigDevice
from hetflow.plan.model.fit import HELD, MIG, MODE, MPS, REPLICAS, TIME_SLICING, WHOLE, Claim, GpuState, gpu_refusals


@dataclass(frozen=True)
class Tenant:
    """One holder of (part of) one GPU: a lease row as the arithmetic sees it."""

    gpu_uuid: str  # the physical GPU
    mode: str = WHOLE  # whole | time-slicing | mps | mig
    share: float = 0.0  # time-slicing / mps: the fraction asked for
    mig: str = ""  # mig: the instance's MIG-... uuid


@dataclass(frozen=True)
class Slot:
    """What one attempt takes of one GPU, beyond the GPU itself: how it holds it (a
    ``Tenant.mode``), its share (time-slicing, mps) or its MIG instance."""

    gpu: Gpu
    mode: str = WHOLE
    share: float = 0.0
    mig: MigDevice | None = None

    def tenant(self) -> Tenant:
        return Tenant(self.gpu.uuid, self.mode, self.share, self.mig.uuid if self.mig is not None else "")

    def describe(self) -> str:
        """``GPU 0 whole``, ``0.25 of GPU 1 (mps)``, ``MIG 1g.10gb #3 of GPU 0``."""
        if self.mig is not None:
            return f"MIG {self.mig.profile} #{self.mig.index} of GPU {self.gpu.index}"
        if self.mode in (TIME_SLICING, MPS):
            return f"{self.share:g} of GPU {self.gpu.index} ({self.mode})"
        return f"GPU {self.gpu.index} whole"


def admits(claim: Tenant, others: Sequence[Tenant], sharing: GpuSharing) -> str | None:
    """None when ``claim`` may join ``others`` (the live tenants of the same GPU, the claim's
    own attempt left out) under the node's ``sharing``; else why not."""
    mine = [t for t in others if t.gpu_uuid == claim.gpu_uuid]
    shared = [t for t in mine if t.mode not in (WHOLE, MIG)]
    state = GpuState(
        sum(t.mode == WHOLE for t in mine),
        len(shared),
        sum(t.share for t in shared),
        modes=frozenset(t.mode for t in shared),
        instances=frozenset(t.mig for t in mine if t.mode == MIG),
    )
    # a live time-sliced lease is not planned at a load (only its count binds); an MPS client is at 1
    level = 1.0 if claim.mode == MPS else math.inf
    refused = gpu_refusals(state, Claim(claim.gpu_uuid, claim.mode, claim.share, level, claim.mig), sharing.replicas)
    if not refused:
        return None
    if claim.mode == WHOLE:
        return f"GPU {claim.gpu_uuid} has {len(mine)} tenant(s)"
    if HELD in refused:
        return f"GPU {claim.gpu_uuid} is held whole"
    if claim.mode == MIG:
        if MODE in refused:
            return f"GPU {claim.gpu_uuid} is shared, not cut into MIG instances"
        return f"MIG instance {claim.mig} is held"
    if MODE in refused:
        held = sorted({t.mode for t in mine if t.mode != claim.mode})
        return f"GPU {claim.gpu_uuid} is held by {', '.join(held)} tenants"
    if REPLICAS in refused:
        return f"GPU {claim.gpu_uuid} has {len(mine)} of {sharing.replicas} {claim.mode} tenants"
    return f"GPU {claim.gpu_uuid} has {state.load:g} of its MPS share taken; {claim.share:g} more does not fit"


def load(gpu: Gpu, tenants: Sequence[Tenant]) -> float:
    """How busy ``gpu`` is: the sum of its tenants' shares (a whole holder or a MIG instance
    counts its GPU as 1 and its slices / 7)."""
    total = 0.0
    for t in tenants:
        if t.gpu_uuid != gpu.uuid:
            continue
        if t.mode == WHOLE:
            total += 1.0
        elif t.mode == MIG:
            found = next((m for m in gpu.mig if m.uuid == t.mig), None)
            total += (found.slices if found is not None else 1) / 7
        else:
            total += t.share
    return total


def share_slot(
    gpus: Sequence[Gpu], tenants: Sequence[Tenant], sharing: GpuSharing, share: float
) -> tuple[Slot | None, str]:
    """The tenancy a share step gets among ``gpus`` (already qualified: vendor, memory,
    constraints): on a time-slicing or MPS node the GPU with the least load that admits
    one more tenant; on an exclusive node a whole free GPU.  (None, why) when none now."""
    usable = [g for g in gpus if not g.mig_enabled]
    if not usable:
        return None, "no GPU outside MIG mode qualifies"
    mode = sharing.mode if sharing.shared else WHOLE
    refused = {g.uuid: admits(Tenant(g.uuid, mode, share), tenants, sharing) for g in usable}
    fits = [g for g in usable if refused[g.uuid] is None]
    if not fits:
        reasons = "; ".join(dict.fromkeys(str(r) for r in refused.values()))
        if mode == WHOLE:
            return None, f"exclusive GPUs: a share takes a whole GPU, and all {len(usable)} qualifying are held"
        return None, f"all {len(usable)} qualifying GPUs are full ({sharing.describe()}: {reasons})"
    best = min(fits, key=lambda g: (load(g, tenants), g.index))
    if mode == WHOLE:
        return Slot(best, WHOLE), "this machine's GPUs are exclusive, so the share takes a whole GPU"
    return Slot(best, mode, share), f"{sharing.describe()}, load {load(best, tenants):g} before it"


def mig_slot(gpus: Sequence[Gpu], tenants: Sequence[Tenant], profile: str, memory: int = 0) -> tuple[Slot | None, str]:
    """A free MIG instance of ``profile`` among ``gpus`` (those in MIG mode) with at least
    ``memory`` bytes when its size is known, the lowest GPU and instance index first;
    (None, why) when none now."""
    having = [
        (g, m)
        for g in gpus
        if g.mig_enabled
        for m in g.mig
        if m.profile == profile and (not memory or not m.memory_bytes or m.memory_bytes >= memory)
    ]
    if not having:
        return None, f"no GPU here has a MIG {profile} instance" + (" with that much memory" if memory else "")
    for g, m in having:
        if admits(Tenant(g.uuid, MIG, 0.0, m.uuid), tenants, GpuSharing()) is None:
            return Slot(g, MIG, 0.0, m), f"MIG {profile} instance {m.index} of GPU {g.index} free"
    return None, f"all {len(having)} MIG {profile} instances are held"
