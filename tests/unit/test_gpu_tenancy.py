"""The local runner's GPU leases: time-slicing replicas, the MPS share sum, MIG instances,
vendors, whole vs shared exclusion (``plan.tenancy`` and the choosers), the lease rows in
the store (schema 4 and its migration) and ``LocalDispatch.reserve`` across two stores on
one file (two hetflow processes).  GPUs are FAKE: ``Gpu`` values built by hand."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hetflow.inventory import Gpu, GpuSharing, MigDevice, Node
from hetflow.plan import Capacity, GreedyChooser, PlanChooser, Slot, Tenant, admits
from hetflow.plan.sharing.tenancy import load, mig_slot, share_slot
from hetflow.state import SCHEMA_VERSION, Lease, Store
from tests.unit.builders import GIB, cpu, gpu, load_steps

TS4 = GpuSharing(mode="time-slicing", replicas=4)
MPS3 = GpuSharing(mode="mps", replicas=3)
EXCL = GpuSharing()


def mig_gpu(index: int = 0, profiles: tuple[str, ...] = ("1g.10gb", "1g.10gb", "3g.40gb")) -> Gpu:
    devs = tuple(
        MigDevice(
            index=i,
            uuid=f"MIG-{index}-{i}",
            profile=p,
            slices=int(p[0]),
            memory_bytes=int(p.split(".")[1][:-2]) * GIB,
            cap_paths=(f"/dev/nvidia-caps/nvidia-cap{10 + 2 * i}", f"/dev/nvidia-caps/nvidia-cap{11 + 2 * i}"),
        )
        for i, p in enumerate(profiles)
    )
    return gpu(index).model_copy(update={"mig": devs, "mig_enabled": True, "model": "NVIDIA A100-SXM4-80GB"})


def amd(index: int) -> Gpu:
    return gpu(index).model_copy(
        update={"vendor": "amd", "model": "AMD Instinct MI250X", "compute_capability": "", "architecture": "gfx90a"}
    )


def host(gpus: tuple[Gpu, ...], sharing: GpuSharing = EXCL) -> Node:
    return Node(name="h", cpu=cpu(8), memory_bytes=32 * GIB, gpus=gpus, gpu_source="fake", gpu_sharing=sharing)


# --- the arithmetic ----------------------------------------------------------------------


def test_time_slicing_admits_up_to_replicas_tenants_whatever_their_shares() -> None:
    held = [Tenant("G", "time-slicing", 0.9)] * 3
    assert admits(Tenant("G", "time-slicing", 0.9), held, TS4) is None
    assert "4 of 4 time-slicing tenants" in str(admits(Tenant("G", "time-slicing", 0.1), [*held, held[0]], TS4))


def test_mps_shares_sum_to_at_most_one_and_clients_to_replicas() -> None:
    assert admits(Tenant("G", "mps", 0.5), [Tenant("G", "mps", 0.5)], MPS3) is None
    assert "does not fit" in str(admits(Tenant("G", "mps", 0.25), [Tenant("G", "mps", 0.5)] * 2, MPS3))
    three = [Tenant("G", "mps", 0.25)] * 3
    assert "3 of 3 mps tenants" in str(admits(Tenant("G", "mps", 0.1), three, MPS3))


def test_whole_holder_and_tenants_exclude_each_other() -> None:
    assert "held whole" in str(admits(Tenant("G", "time-slicing", 0.25), [Tenant("G")], TS4))
    assert "1 tenant" in str(admits(Tenant("G"), [Tenant("G", "time-slicing", 0.25)], TS4))
    assert admits(Tenant("G"), [Tenant("OTHER")], TS4) is None
    assert "held by time-slicing" in str(admits(Tenant("G", "mps", 0.25), [Tenant("G", "time-slicing", 0.25)], MPS3))


def test_mig_instances_are_leased_one_by_one() -> None:
    one = Tenant("G", "mig", 0.0, "MIG-0-0")
    assert admits(Tenant("G", "mig", 0.0, "MIG-0-1"), [one], EXCL) is None
    assert "MIG-0-0 is held" in str(admits(one, [one], EXCL))
    assert "held whole" in str(admits(one, [Tenant("G")], EXCL))


def test_share_goes_to_the_least_loaded_gpu_that_admits_it() -> None:
    a, b = gpu(0), gpu(1)
    tenants = [Tenant(a.uuid, "mps", 0.5), Tenant(b.uuid, "mps", 0.25)]
    slot, _ = share_slot([a, b], tenants, MPS3, 0.5)
    assert slot is not None and slot.gpu == b and (slot.mode, slot.share) == ("mps", 0.5)
    assert load(b, tenants) == 0.25
    full = [Tenant(a.uuid, "mps", 0.75), Tenant(b.uuid, "mps", 0.75)]
    slot, why = share_slot([a, b], full, MPS3, 0.5)
    assert slot is None and "full (mps x3: " in why and "does not fit" in why


def test_share_on_an_exclusive_node_takes_a_whole_gpu_and_says_so() -> None:
    a, b = gpu(0), gpu(1)
    slot, why = share_slot([a, b], [Tenant(a.uuid)], EXCL, 0.25)
    assert slot == Slot(b, "whole") and "exclusive" in why
    assert share_slot([a], [Tenant(a.uuid)], EXCL, 0.25)[0] is None


def test_mig_slot_picks_a_free_instance_of_the_profile() -> None:
    g = mig_gpu()
    slot, _ = mig_slot([g], [Tenant(g.uuid, "mig", 0.0, "MIG-0-0")], "1g.10gb")
    assert slot is not None and slot.mig is not None and slot.mig.uuid == "MIG-0-1"
    assert mig_slot([g], [Tenant(g.uuid, "mig", 0.0, f"MIG-0-{i}") for i in (0, 1)], "1g.10gb")[0] is None
    assert "no GPU here has a MIG 2g.20gb" in mig_slot([g], [], "2g.20gb")[1]


# --- the choosers --------------------------------------------------------------------------

SHARE = load_steps(
    """
    s:
      image: x
      resources: {gpu_share: 0.5}
    """
).workflow.steps["s"]
MIG_STEP = load_steps(
    """
    m:
      image: x
      resources: {gpu_mig: 1g.10gb}
    """
).workflow.steps["m"]
AMD_STEP = load_steps(
    """
    a:
      image: x
      resources: {gpus: 1, gpu_vendor: amd}
    """
).workflow.steps["a"]
WHOLE = load_steps(
    """
    w:
      image: x
      resources: {gpus: 1}
    """
).workflow.steps["w"]


def test_greedy_places_a_share_beside_another_tenant_on_a_time_slicing_node() -> None:
    g = gpu(0)
    n = host((g,), TS4)
    held = (Tenant(g.uuid, "time-slicing", 0.5),)
    choice = GreedyChooser().choose(SHARE, n, Capacity(8, 32 * GIB, ()), "s", held)
    assert choice.variant == "default" and choice.slot == Slot(g, "time-slicing", 0.5)
    assert "time-slicing x4" in choice.why


def test_a_whole_gpu_step_waits_while_the_gpu_has_tenants() -> None:
    g = gpu(0)
    n = host((g,), TS4)
    free = Capacity(8, 32 * GIB, ())  # dispatch leaves a GPU with any tenant out of the free ones
    choice = GreedyChooser().choose(WHOLE, n, free, "w", (Tenant(g.uuid, "time-slicing", 0.5),))
    assert choice.variant is None and choice.wait


def test_a_share_waits_while_the_gpu_is_held_whole() -> None:
    g = gpu(0)
    choice = GreedyChooser().choose(SHARE, host((g,), TS4), Capacity(8, 32 * GIB, ()), "s", (Tenant(g.uuid),))
    assert choice.variant is None and choice.wait and "held whole" in choice.explain()


def test_mig_step_gets_an_instance_and_never_a_whole_gpu_in_mig_mode() -> None:
    g = mig_gpu()
    n = host((g,))
    choice = GreedyChooser().choose(MIG_STEP, n, Capacity.of(n), "m", ())
    assert choice.slot is not None and choice.slot.mig is not None and choice.slot.mig.profile == "1g.10gb"
    whole = GreedyChooser().choose(WHOLE, n, Capacity.of(n), "w", ())
    assert whole.variant is None and not whole.wait  # the only GPU is in MIG mode: never whole


def test_vendor_matching_amd_takes_only_amd_gpus() -> None:
    n = host((gpu(0), amd(1)))
    choice = GreedyChooser().choose(AMD_STEP, n, Capacity.of(n), "a")
    assert choice.variant == "default" and [g.vendor for g in choice.gpus] == ["amd"]
    nvidia_only = host((gpu(0),))
    assert GreedyChooser().choose(AMD_STEP, nvidia_only, Capacity.of(nvidia_only), "a").variant is None
    taken = GreedyChooser().choose(WHOLE, n, Capacity.of(n), "w")
    assert [g.vendor for g in taken.gpus] == ["nvidia"]


def test_plan_chooser_places_a_planned_share_among_tenants() -> None:
    g = gpu(0)
    n = host((g,), MPS3)
    chooser = PlanChooser({"s": "default"})
    ok = chooser.choose(SHARE, n, Capacity(8, 32 * GIB, ()), "s", (Tenant(g.uuid, "mps", 0.5),))
    assert ok.slot == Slot(g, "mps", 0.5)
    full = chooser.choose(SHARE, n, Capacity(8, 32 * GIB, ()), "s", (Tenant(g.uuid, "mps", 0.75),))
    assert full.variant is None and full.wait


# --- the store ---------------------------------------------------------------------------


def holder(container: str, pid: int = 1) -> Lease:
    return Lease("", "r1", "s", 1, container, pid)


def ts_admits(claim: Lease, others: list[Lease]) -> bool:
    def t(x: Lease) -> Tenant:
        return Tenant(x.gpu_uuid, x.mode, x.share, x.mig)

    return admits(t(claim), [t(o) for o in others], GpuSharing(mode="time-slicing", replicas=2)) is None


def share(container: str) -> Lease:
    return Lease("GPU-0", "r1", "s", 1, container, 1, "time-slicing", 0.5)


def test_two_stores_on_one_file_share_the_tenancy(tmp_path: Path) -> None:
    one, two = Store(tmp_path / "s.db"), Store(tmp_path / "s.db")  # two hetflow processes
    assert one.acquire([share("c1")], [], ts_admits)
    assert two.acquire([share("c2")], [], ts_admits)
    assert not one.acquire([share("c3")], [], ts_admits)  # replicas 2
    assert not two.acquire_gpus(["GPU-0"], holder("c4"), [])  # whole: the GPU has tenants
    rows = {(x.container, x.mode, x.share) for x in two.leases()}
    assert rows == {("c1", "time-slicing", 0.5), ("c2", "time-slicing", 0.5)}
    one.release_gpus("c1")
    assert two.acquire([share("c3")], [], ts_admits)


def test_stale_tenant_is_dropped_only_as_seen(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    store.acquire([share("c1")], [], ts_admits)
    store.acquire([share("c2")], [], ts_admits)
    (dead, _) = store.leases()
    assert store.acquire([share("c3")], [dead], ts_admits)
    assert sorted(x.container for x in store.leases()) == ["c2", "c3"]


V3_LEASES = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, workflow_file TEXT NOT NULL, state TEXT NOT NULL,
  created REAL NOT NULL, started REAL, ended REAL, pid INTEGER, uid INTEGER NOT NULL,
  gid INTEGER NOT NULL, workdir TEXT NOT NULL, spec_json TEXT NOT NULL,
  params_json TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
  backend TEXT NOT NULL DEFAULT 'local', backend_json TEXT NOT NULL DEFAULT '{}', pid_start INTEGER);
CREATE TABLE gpu_leases (
  gpu_uuid TEXT PRIMARY KEY, run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INTEGER NOT NULL,
  container TEXT NOT NULL, pid INTEGER NOT NULL, acquired REAL NOT NULL);
INSERT INTO meta VALUES ('schema_version', '3');
INSERT INTO gpu_leases VALUES ('GPU-0', 'r1', 'a', 1, 'hf-r1-a-1', 42, 1.0);
"""


def test_a_schema_3_store_keeps_its_leases_as_whole_gpus(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    db = sqlite3.connect(path)
    db.executescript(V3_LEASES)
    db.commit()
    db.close()

    store = Store(path)

    assert store.leases() == [Lease("GPU-0", "r1", "a", 1, "hf-r1-a-1", 42, "whole", 0.0, "")]
    assert not store.acquire([share("c2")], [], ts_admits)  # still held whole
    store.release_gpus("hf-r1-a-1")
    assert store.acquire([share("c2")], [], ts_admits) and store.acquire([share("c3")], [], ts_admits)
    version = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),) == ("4",)
    Store(path).close()  # opening again migrates nothing twice
    assert len(Store(path).leases()) == 2


@pytest.mark.parametrize("mode", ["time-slicing", "mps"])
def test_mixed_modes_never_share_a_gpu(tmp_path: Path, mode: str) -> None:
    store = Store(tmp_path / "s.db")
    other = "mps" if mode == "time-slicing" else "time-slicing"
    sharing = GpuSharing(mode=mode, replicas=4)  # type: ignore[arg-type]

    def fits(claim: Lease, others: list[Lease]) -> bool:
        return (
            admits(
                Tenant(claim.gpu_uuid, claim.mode, claim.share),
                [Tenant(o.gpu_uuid, o.mode, o.share) for o in others],
                sharing,
            )
            is None
        )

    assert store.acquire([Lease("GPU-0", "r", "s", 1, "c1", 1, other, 0.25)], [], fits)
    assert not store.acquire([Lease("GPU-0", "r", "s", 1, "c2", 1, mode, 0.25)], [], fits)


def test_validate_says_a_mig_profile_this_machine_lacks_is_an_error() -> None:
    from hetflow.plan import feasibility_problems

    loaded = load_steps("m:\n  image: x\n  resources: {gpu_mig: 2g.20gb}\n")
    (problem,) = feasibility_problems(loaded, host((mig_gpu(),)))
    assert problem.severity == "error"
    assert "asks for gpu_mig: 2g.20gb; this machine has MIG layout 1g.10gb, 1g.10gb, 3g.40gb" in problem.message
    assert (
        feasibility_problems(load_steps("m:\n  image: x\n  resources: {gpu_mig: 3g.40gb}\n"), host((mig_gpu(),))) == []
    )


def test_validate_names_the_vendor_or_mig_mode_that_is_missing() -> None:
    from hetflow.plan import feasibility_problems

    amd_on_nvidia = feasibility_problems(
        load_steps("a:\n  image: x\n  resources: {gpus: 1, gpu_vendor: amd}\n"), host((gpu(0),))
    )
    assert "asks for 1 amd GPU; this machine has 1 nvidia GPUs" in amd_on_nvidia[0].message
    mig_on_plain = feasibility_problems(
        load_steps("m:\n  image: x\n  resources: {gpu_mig: 1g.10gb}\n"), host((gpu(0),))
    )
    assert "no nvidia GPU of this machine is in MIG mode" in mig_on_plain[0].message
    whole_on_mig = feasibility_problems(load_steps("w:\n  image: x\n  resources: {gpus: 1}\n"), host((mig_gpu(),)))
    assert "1 in MIG mode, given only by instance (gpu_mig)" in whole_on_mig[0].message


def test_a_mig_instance_too_small_for_gpu_memory_is_not_taken() -> None:
    g = mig_gpu()  # 1g.10gb instances hold 10 GiB
    assert mig_slot([g], [], "1g.10gb", memory=8 * GIB)[0] is not None
    slot, why = mig_slot([g], [], "1g.10gb", memory=12 * GIB)
    assert slot is None and "with that much memory" in why
