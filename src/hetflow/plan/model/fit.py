"""The one capacity predicate: ``fits(node, demand)`` is the reasons ``demand`` does not fit
on ``node`` as it stands, an empty tuple when it fits.  "Does not fit" is a value, not an
exception (STYLE.md), after Kubernetes' ``noderesources.Fits`` (fit.go ``fitsRequest``: the
list of insufficient resources) and Nomad's ``AllocsFit``, each one predicate that the
scheduler, the admission and the re-check all ask.

Its askers, each with the facts its model keeps (``ARCHITECTURE.md``, plan/):

- the planner's timeline (``search.timeline``): per segment of its step functions; the
  counted part is compared with ``room`` (computed here once per demand, so the hot loop
  compares numbers instead of calling), a GPU's static part (``gpu_refusals`` of an idle
  GPU) once per GPU, its tenants per segment with ``sharing_refusal``;
- ``check_plan`` (``validate``, ``sharing.sharecheck``): per instant, the instant's total
  on the empty machine, and each shared tenant against the others on its GPU (a whole GPU
  is held to its index alone, not to MIG mode: the one difference the agreement table,
  tests/unit/test_admission_agree.py, keeps by name);
- the simulation and the baselines (``model.machine.Machine``): a machine now (the replay
  holds a plan's GPUs as planned, their modes being check_plan's to judge);
- the local leases (``sharing.tenancy.admits``): one GPU's live leases;
- the Kubernetes admission (``execute.backends.kubernetes.admission``): a node's room, its
  resources by their Kubernetes names (``scalars``).

**Counted amounts** (cores, memory, whole GPUs by count, named scalars): the node offers
``cores`` and has ``used_cores`` in use; a demand fits when ``used <= offered - demand``,
cores and scalars with ``CORE_EPS`` (fractional amounts add up with rounding error; a hair
over still fits), memory and GPU counts exactly (whole bytes, whole devices).  A model that
keeps only what is free (a machine now, a Kubernetes node's room) offers that, with nothing
used.  An amount the demand does not ask for (0) is never short (fit.go skips a zero request).

**One GPU** (``GpuState``, ``Claim``): a GPU is held whole, by shared tenants (time-slicing
or MPS, ``sharing_refusal``: at most ``replicas`` of them, their shares within the lowest
load any of them was planned at), or by MIG instances (each a device of its own); the ways
exclude each other, and a GPU in MIG mode is given only by instance.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

CORE_EPS = 1e-9  # fractional cores add up with rounding error; a hair over capacity still fits
# A load is a sum of a few shares in (0, 1]; a planned load is recovered from run times
# (``sharecheck.planned_load``), whose rounding at start times near 1e6 s reaches ~1e-9 of a
# load, so the load is compared with a margin well above that and far below any share.
LOAD_TOL = 1e-6

# How a demand holds one GPU (``Claim.mode``; the local leases' ``Tenant.mode`` too).
WHOLE, TIME_SLICING, MPS, MIG = "whole", "time-slicing", "mps", "mig"

# Reasons (a scalar's reason is its own name, as Kubernetes names an extended resource).
CORES = "cores"  # fewer cores left than asked
MEMORY = "memory"  # fewer bytes left than asked
GPUS = "gpus"  # fewer whole GPUs left (by count) than asked
MIG_MODE = "mig-mode"  # the GPU is in MIG mode: given only by instance, never whole nor shared
HELD = "held"  # the GPU is held whole
TENANTS = "tenants"  # a whole GPU is asked for, and the GPU has tenants or MIG instances held
MODE = "mode"  # the GPU is held another way: tenants of another mode, or MIG instances beside shares
INSTANCE = "instance"  # the MIG instance asked for is held
REPLICAS = "replicas"  # sharing_refusal: more tenants than the GPU's replicas
LOAD = "load"  # sharing_refusal: the shares sum past the lowest planned load


def sharing_refusal(count: int, load: float, level: float, replicas: int) -> str | None:
    """None when ``count`` tenants whose shares sum to ``load`` may share one GPU at once,
    the lowest load any of them was planned at being ``level`` (``math.inf``: no tenant is
    planned at a load) and the GPU taking at most ``replicas``; else ``REPLICAS`` or ``LOAD``."""
    if count > replicas:
        return REPLICAS
    if load > level + LOAD_TOL:
        return LOAD
    return None


@dataclass(frozen=True, slots=True)
class Claim:
    """What a demand takes of one particular GPU: the whole of it, a ``share`` of it planned
    at load ``level`` (``math.inf``: not planned at a load, as a live time-sliced lease) in
    ``mode`` (``TIME_SLICING`` or ``MPS``), or its MIG ``instance``."""

    gpu: Hashable  # the GPU's index on its machine, or its UUID (the local leases)
    mode: str = WHOLE
    share: float = 0.0
    level: float = math.inf
    instance: Hashable = None


@dataclass(frozen=True, slots=True)
class Demand:
    """What one step (or one replica, or one instant's total) asks of one node: counted
    cores, memory and whole GPUs, ``claims`` on particular GPUs, and ``scalars``: other
    counted resources by name (a Kubernetes extended resource, a DRA device class)."""

    cores: float = 0.0
    memory: int = 0  # bytes
    gpus: int = 0  # whole GPUs, any of them (counted); particular ones are ``claims``
    claims: tuple[Claim, ...] = ()
    scalars: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True, slots=True)
class GpuState:
    """What holds one GPU at one instant (the empty default: nothing)."""

    whole: int = 0  # holders of the whole GPU
    tenants: int = 0  # shared tenants (time-slicing or MPS)
    load: float = 0.0  # the sum of their shares
    low: float = math.inf  # the lowest load any of them was planned at
    modes: frozenset[str] = frozenset()  # the modes they hold it in
    instances: frozenset[Hashable] = frozenset()  # MIG instances held
    mig_mode: bool = False  # the GPU is cut into MIG instances


IDLE = GpuState()


@dataclass(frozen=True, slots=True)
class NodeState:
    """One node as it stands: what it offers of each counted amount and what of it is in
    use, the tenants one GPU takes (``replicas``), and what holds each GPU (by the key a
    ``Claim`` names it with; a GPU not in ``gpu`` is idle)."""

    cores: float = 0.0
    memory: int = 0  # bytes
    gpus: int = 0
    used_cores: float = 0.0
    used_memory: int = 0
    used_gpus: int = 0
    replicas: int = 1
    gpu: Mapping[Any, GpuState] = field(default_factory=dict)  # keys: GPU indices, UUIDs, (GPU, instance)
    scalars: Mapping[str, float] = field(default_factory=dict)
    used_scalars: Mapping[str, float] = field(default_factory=dict)


def room(
    cores: float, memory: int, gpus: int, ask_cores: float, ask_memory: int, ask_gpus: int
) -> tuple[float, int, int]:
    """The most cores, memory and whole GPUs that may be in use on a node offering
    ``cores``, ``memory`` and ``gpus`` for a demand of ``ask_*`` to fit: ``fits`` compares
    the use with it, and the timeline compares each segment's use with it (one room per
    demand, computed here)."""
    return cores + CORE_EPS - ask_cores, memory - ask_memory, gpus - ask_gpus


def fits(node: NodeState, demand: Demand) -> tuple[str, ...]:
    """The reasons ``demand`` does not fit on ``node`` (module docstring); () when it fits."""
    cores, memory, gpus = room(node.cores, node.memory, node.gpus, demand.cores, demand.memory, demand.gpus)
    short_cores = demand.cores > 0 and node.used_cores > cores
    short_memory = demand.memory > 0 and node.used_memory > memory
    short_gpus = demand.gpus > 0 and node.used_gpus > gpus
    if not (short_cores or short_memory or short_gpus or demand.scalars or demand.claims):
        return ()  # the common answer, without a list (the baselines ask in their inner loops)
    out: list[str] = []
    if short_cores:
        out.append(CORES)
    if short_memory:
        out.append(MEMORY)
    if short_gpus:
        out.append(GPUS)
    for name, ask in demand.scalars:
        if ask > 0 and node.used_scalars.get(name, 0.0) > node.scalars.get(name, 0.0) + CORE_EPS - ask:
            out.append(name)
    for claim in demand.claims:
        out.extend(gpu_refusals(node.gpu.get(claim.gpu, IDLE), claim, node.replicas))
    return tuple(dict.fromkeys(out)) if demand.claims else tuple(out)


def gpu_refusals(gpu: GpuState, claim: Claim, replicas: int) -> tuple[str, ...]:
    """The reasons ``claim`` may not take its GPU, which stands as ``gpu`` on a node whose
    GPUs take ``replicas`` tenants each; () when it may.  Whole and shared claims need a GPU
    out of MIG mode; a MIG instance is named by the claim, so it exists (which instances a
    GPU has is the node's description: ``check_plan`` holds a plan to it)."""
    out: list[str] = []
    if gpu.mig_mode and claim.mode != MIG:
        out.append(MIG_MODE)
    if gpu.whole:
        out.append(HELD)
    if claim.mode == WHOLE:
        if gpu.tenants or gpu.instances:
            out.append(TENANTS)
    elif claim.mode == MIG:
        if gpu.tenants:
            out.append(MODE)
        if claim.instance in gpu.instances:
            out.append(INSTANCE)
    else:
        if gpu.instances or any(mode != claim.mode for mode in gpu.modes):
            out.append(MODE)
        lowest = gpu.low if gpu.low < claim.level else claim.level
        why = sharing_refusal(gpu.tenants + 1, gpu.load + claim.share, lowest, replicas)
        if why is not None:
            out.append(why)
    return tuple(out)
