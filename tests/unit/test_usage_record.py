"""What an attempt used: cgroup layouts and counter files (v1, hybrid, v2), engine times,
the store's schema-3 columns and their migration, and the runner recording usage."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hetflow.execute import ContainerSpec, Usage, run_args
from hetflow.execute.backends.local.cgroups import (
    CgroupLayout,
    parse_cpu_stat,
    parse_cpuacct_usage,
    parse_int,
    parse_mounts,
    prepare,
    read_usage,
    remove,
)
from hetflow.execute.engine import parse_engine_time, usage_from_inspect
from hetflow.state import SCHEMA_VERSION, Store
from tests.unit.builders import Outcome, world

# /proc/self/mounts of this machine (Debian 12, hybrid: v1 controllers, an empty v2 tree).
HYBRID = """\
tmpfs /sys/fs/cgroup tmpfs rw,relatime,mode=755 0 0
cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0
cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0
cgroup /sys/fs/cgroup/systemd cgroup rw,relatime,name=systemd 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0
"""
# systemd's classic v1 layout: cpu and cpuacct mounted together.
V1_COMOUNTED = """\
cgroup /sys/fs/cgroup/cpu,cpuacct cgroup rw,nosuid,nodev,noexec,relatime,cpu,cpuacct 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
"""
# Most machines today: pure v2.
V2 = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
"""
NO_MEMORY = "cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0\n"

# cpu.stat of a v2 cgroup (kernel 6.x).
CPU_STAT = """\
usage_usec 1372140
user_usec 901000
system_usec 471140
nr_periods 0
nr_throttled 0
throttled_usec 0
"""


@pytest.mark.parametrize(
    ("text", "version", "memory", "cpu"),
    [
        (HYBRID, 1, "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpuacct"),
        (V1_COMOUNTED, 1, "/sys/fs/cgroup/memory", "/sys/fs/cgroup/cpu,cpuacct"),
        (V2, 2, "/sys/fs/cgroup", "/sys/fs/cgroup"),
    ],
    ids=["hybrid", "v1-comounted", "v2"],
)
def test_the_layout_names_where_memory_and_cpu_counters_live(text: str, version: int, memory: str, cpu: str) -> None:
    layout = parse_mounts(text)
    assert layout is not None
    assert (layout.version, str(layout.memory), str(layout.cpu)) == (version, memory, cpu)


def test_the_hybrid_layout_removes_the_parent_from_every_hierarchy_including_the_empty_v2_tree() -> None:
    layout = parse_mounts(HYBRID)
    assert layout is not None
    assert "/sys/fs/cgroup/unified" in map(str, layout.roots)
    assert "/sys/fs/cgroup/pids" in map(str, layout.roots)


def test_without_a_memory_controller_nothing_is_measured() -> None:
    assert parse_mounts(NO_MEMORY) is None
    assert parse_mounts("") is None


@pytest.mark.parametrize(
    ("parse", "text", "want"),
    [
        (parse_int, "68534272\n", 68534272),
        (parse_int, "max\n", None),
        (parse_int, "", None),
        (parse_cpuacct_usage, "1372140175\n", 1.372140175),
        (parse_cpuacct_usage, "garbage", None),
        (parse_cpu_stat, CPU_STAT, 1.37214),
        (parse_cpu_stat, "user_usec 5\n", None),
    ],
    ids=["peak", "not-a-number", "empty", "cpuacct-ns", "cpuacct-garbage", "cpu-stat", "cpu-stat-no-usage"],
)
def test_counter_files_parse(parse: object, text: str, want: float | None) -> None:
    assert callable(parse)
    got = parse(text)
    assert got == pytest.approx(want) if want is not None else got is None


def _tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_v1_usage_is_read_from_the_memory_and_cpuacct_hierarchies(tmp_path: Path) -> None:
    layout = CgroupLayout(1, tmp_path / "memory", tmp_path / "cpuacct", (tmp_path / "memory", tmp_path / "cpuacct"))
    _tree(
        tmp_path,
        {
            "memory/hetflow/hf-r-a-1/memory.max_usage_in_bytes": "69300224\n",
            "cpuacct/hetflow/hf-r-a-1/cpuacct.usage": "1077690182\n",
        },
    )
    got = read_usage(layout, "hf-r-a-1")
    assert got.peak_memory == 69300224
    assert got.cpu_seconds == pytest.approx(1.077690182)


def test_v2_usage_is_read_from_memory_peak_and_cpu_stat(tmp_path: Path) -> None:
    layout = CgroupLayout(2, tmp_path, tmp_path, (tmp_path,))
    _tree(tmp_path, {"hetflow/hf-r-a-1/memory.peak": "1048576\n", "hetflow/hf-r-a-1/cpu.stat": CPU_STAT})
    got = read_usage(layout, "hf-r-a-1")
    assert got.peak_memory == 1048576
    assert got.cpu_seconds == pytest.approx(1.37214)


def test_a_counter_that_is_not_there_is_unknown_not_zero(tmp_path: Path) -> None:
    # memory.peak came with kernel 5.19: an older v2 kernel has cpu.stat only
    layout = CgroupLayout(2, tmp_path, tmp_path, (tmp_path,))
    _tree(tmp_path, {"hetflow/hf-r-a-1/cpu.stat": CPU_STAT})
    got = read_usage(layout, "hf-r-a-1")
    assert got.peak_memory is None and got.cpu_seconds == pytest.approx(1.37214)
    nothing = read_usage(layout, "hf-r-other-1")
    assert (nothing.peak_memory, nothing.cpu_seconds) == (None, None)


def test_v2_prepare_enables_memory_and_cpu_for_the_attempts_parent(tmp_path: Path) -> None:
    layout = CgroupLayout(2, tmp_path, tmp_path, (tmp_path,))
    _tree(tmp_path, {"cgroup.controllers": "cpuset cpu io memory pids\n"})
    # a real cgroupfs fills these in; on a plain directory the test writes them
    _tree(tmp_path, {"hetflow/cgroup.controllers": "cpuset cpu io memory pids\n"})
    assert prepare(layout, "hf-r-a-1")
    assert (tmp_path / "hetflow" / "hf-r-a-1").is_dir()
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu +memory"
    assert (tmp_path / "hetflow" / "cgroup.subtree_control").read_text() == "+cpu +memory"


def test_remove_takes_the_parent_and_what_the_runtime_left_under_it_from_every_hierarchy(tmp_path: Path) -> None:
    roots = (tmp_path / "memory", tmp_path / "cpuacct", tmp_path / "unified")
    for r in roots:
        (r / "hetflow" / "hf-r-a-1" / "libpod-123").mkdir(parents=True)
    (tmp_path / "memory" / "hetflow" / "hf-r-b-1").mkdir()
    remove(CgroupLayout(1, roots[0], roots[1], roots), "hf-r-a-1")
    assert not any((r / "hetflow" / "hf-r-a-1").exists() for r in roots)
    assert (tmp_path / "memory" / "hetflow" / "hf-r-b-1").is_dir()  # another attempt's stays


def _spec(**kw: object) -> ContainerSpec:
    base: dict[str, object] = {"name": "hf-r-a-1", "image": "img", "command": ("true",), "user": "1:1"}
    return ContainerSpec(labels={}, env={}, **{**base, **kw})  # type: ignore[arg-type]


def test_podman_runs_a_measured_attempt_under_its_parent_cgroup_without_conmon() -> None:
    args = run_args(_spec(cgroup_parent="/hetflow/hf-r-a-1"), engine="podman")
    assert "--cgroups=no-conmon" in args
    assert args[args.index("--cgroup-parent") + 1] == "/hetflow/hf-r-a-1"
    assert args.index("--cgroup-parent") < args.index("img")


@pytest.mark.parametrize(("spec", "engine"), [(_spec(), "podman"), (_spec(cgroup_parent="/x"), "docker")])
def test_no_cgroup_options_without_a_parent_or_on_docker(spec: ContainerSpec, engine: str) -> None:
    args = run_args(spec, engine=engine)
    assert "--cgroup-parent" not in args and "--cgroups=no-conmon" not in args


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("2026-11-25T01:54:46.969650123Z", 1795571686.96965),
        ("2026-11-25T01:54:46.96965+00:00", 1795571686.96965),
        ("2026-11-25T02:54:46+01:00", 1795571686.0),
        ("0001-01-01T00:00:00Z", None),
        ("", None),
        ("yesterday", None),
        (None, None),
    ],
    ids=["podman-ns", "micro", "offset", "zero-time", "empty", "garbage", "absent"],
)
def test_engine_times_parse_to_epoch_seconds(text: str | None, want: float | None) -> None:
    got = parse_engine_time(text)
    assert got == pytest.approx(want) if want is not None else got is None


def test_inspect_gives_the_image_digest_and_the_containers_own_times() -> None:
    info = {
        "Image": "5d5e0f1ab0ba",
        "ImageDigest": "sha256:01d8",
        "State": {"StartedAt": "2026-11-25T01:54:46Z", "FinishedAt": "2026-11-25T01:54:48Z"},
    }
    u = usage_from_inspect(info)
    assert (u.image_id, u.ended - (u.started or 0) if u.ended else None) == ("sha256:01d8", 2.0)
    assert usage_from_inspect({"Image": "sha256:abc"}).image_id == "sha256:abc"  # docker: no digest, the ID
    assert usage_from_inspect({}) == Usage()


# --- the store -----------------------------------------------------------------------------

V2_STORE = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, workflow_file TEXT NOT NULL, state TEXT NOT NULL,
  created REAL NOT NULL, started REAL, ended REAL, pid INTEGER, uid INTEGER NOT NULL,
  gid INTEGER NOT NULL, workdir TEXT NOT NULL, spec_json TEXT NOT NULL,
  params_json TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
  backend TEXT NOT NULL DEFAULT 'local', backend_json TEXT NOT NULL DEFAULT '{}');
CREATE TABLE attempts (
  run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INTEGER NOT NULL, variant TEXT NOT NULL,
  node TEXT NOT NULL, gpus TEXT NOT NULL, gpu_uuids TEXT NOT NULL, container TEXT NOT NULL,
  image TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER, started REAL, ended REAL,
  message TEXT NOT NULL DEFAULT '', PRIMARY KEY (run_id, step, attempt));
CREATE TABLE events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step TEXT, time REAL NOT NULL,
  kind TEXT NOT NULL, message TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}');
INSERT INTO meta VALUES ('schema_version', '2');
INSERT INTO runs VALUES
  ('r1', 'wf', 'f.yaml', 'succeeded', 1.0, 1.0, 9.0, NULL, 0, 0, '/w', '{}', '{}', '', 'local', '{}');
INSERT INTO attempts VALUES ('r1', 'a', 1, 'default', 'vm', '[]', '[]', 'hf-r1-a-1', 'img', 'succeeded', 0,
  2.0, 5.0, '');
"""


def test_a_schema_2_store_gets_the_usage_columns_and_old_attempts_read_as_unknown(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    db = sqlite3.connect(path)
    db.executescript(V2_STORE)
    db.commit()
    db.close()

    store = Store(path)

    (old,) = store.attempts("r1")
    assert (old.step, old.state, old.ended) == ("a", "succeeded", 5.0)
    assert (old.cpus, old.memory, old.peak_memory, old.cpu_seconds, old.image_id) == (None,) * 5
    store.set_usage("r1", "a", 1, peak_memory=1024, cpu_seconds=0.5)
    assert store.attempts("r1")[0].peak_memory == 1024
    version = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    assert version == (str(SCHEMA_VERSION),) == ("4",)
    assert store.run("r1").pid_start is None  # runs gain the executor start time column, unknown for old ones
    Store(path)  # opening again finds nothing to do


def test_set_usage_writes_only_usage_columns(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.db")
    with pytest.raises(ValueError, match="state"):
        store.set_usage("r", "a", 1, state="succeeded")


# --- the runner ----------------------------------------------------------------------------

ONE = """
a:
  image: a
  retries: 1
  resources: {cpus: 2, memory: 1Gi}
"""


def test_the_runner_records_what_each_attempt_asked_for_and_used(tmp_path: Path) -> None:
    w = world(tmp_path, ONE, outcomes={"a": [Outcome(exit_code=1), Outcome()]})
    seen = iter([Usage(5 << 20, 0.25, "sha256:x", 100.0, 101.0), Usage(6 << 20, 0.5, "sha256:x", 103.0, 104.5)])
    w.engine.measure = lambda spec: next(seen)
    assert w.execute() == "succeeded"
    first, second = w.store.attempts(w.run.id, "a")
    assert (first.state, first.peak_memory, first.cpu_seconds) == ("failed", 5 << 20, 0.25)  # failures too
    assert (second.state, second.peak_memory, second.cpu_seconds) == ("succeeded", 6 << 20, 0.5)
    assert (second.cpus, second.memory, second.image_id) == (2.0, 1 << 30, "sha256:x")
    assert (second.run_started, second.run_ended) == (103.0, 104.5)
    (row,) = w.store.usage_history("wf")
    assert (row.step, row.memory, row.peak_memory, row.seconds) == ("a", 1 << 30, 6 << 20, 1.5)


def test_an_engine_that_cannot_measure_leaves_usage_unknown(tmp_path: Path) -> None:
    w = world(tmp_path, ONE)
    assert w.execute() == "succeeded"
    (a,) = w.store.attempts(w.run.id)
    assert (a.peak_memory, a.cpu_seconds, a.image_id, a.run_started) == (None, None, None, None)
    assert (a.cpus, a.memory) == (2.0, 1 << 30)  # the request is always known


def test_usage_history_keeps_the_newest_few_of_each_step_as_the_whole_history_orders_them(tmp_path: Path) -> None:
    """``usage_history(newest=N)`` (what ``plan``'s right-sizing reads) is the whole history
    with each (workflow, step, variant) cut to its first N rows, in the same order: the
    suggestions learned from it are the same.  Ties in ``ended`` included."""
    from hetflow.plan import SIZING_KEEP, UsageSample, suggest_sizes
    from tests.integration.uikit import synthetic_run

    store = Store(tmp_path / "state.db")
    try:
        for n in range(9):
            for wf in ("w", "v"):
                run = f"r{n}{wf}"
                synthetic_run(store, tmp_path, run, name=wf, steps=["a", "b"], created=1000.0 + 10 * (n % 4))
                for step, peak in (("a", 10 << 20), ("b", (n + 1) << 20)):
                    ended = 2000.0 + (n % 3)  # three runs share each ended time
                    store.set_attempt(run, step, 1, cpus=8.0, memory=4 << 30, peak_memory=peak, ended=ended)
        whole = store.usage_history("w")
        kept = store.usage_history("w", newest=SIZING_KEEP)
        for everything in (False, True):
            if everything:
                whole, kept = store.usage_history(), store.usage_history(newest=SIZING_KEEP)
            seen: dict[tuple[str, str, str], int] = {}
            first = []
            for row in whole:
                key = (row.workflow, row.step, row.variant)
                seen[key] = seen.get(key, 0) + 1
                if seen[key] <= SIZING_KEEP:
                    first.append(row)
            assert kept == first
            assert len(kept) == SIZING_KEEP * len(seen) < len(whole)
            learned = [suggest_sizes(UsageSample(**r.__dict__) for r in rows) for rows in (whole, kept)]
            assert learned[0] == learned[1] != []
    finally:
        store.close()


def test_history_keeps_the_newest_few_of_each_key_as_the_whole_history_orders_them(tmp_path: Path) -> None:
    """``history(workflow, newest=N)`` (what the planner's profile reads, through the
    ``attempts_history`` index) is, for each (step, variant, node), the whole history's
    first N rows of it in the same order: the profile learned from it is the same.  Ties in
    ``ended`` included; another workflow's attempts with the same keys are not counted."""
    from hetflow.plan import PROFILE_KEEP, learn
    from tests.integration.uikit import synthetic_run

    store = Store(tmp_path / "state.db")
    try:
        for n in range(15):
            for wf in ("w", "v"):
                run = f"r{n}{wf}"
                node = "big" if n % 2 else "small"
                synthetic_run(store, tmp_path, run, name=wf, steps=["a", "b"], created=1000.0 + n, node=node)
                for step in ("a", "b"):
                    started = 1000.0 + n * (3 if step == "a" else 1)
                    store.set_attempt(run, step, 1, started=started, ended=2000.0 + (n % 3))  # 3 runs per ended
        whole = store.history("w")
        kept = store.history("w", newest=PROFILE_KEEP)
        first: dict[tuple[str, ...], list[tuple[str, str, str, str, float]]] = {}
        for row in whole:
            first.setdefault(row[:4], [])
            if len(first[row[:4]]) < PROFILE_KEEP:
                first[row[:4]].append(row)
        by_key: dict[tuple[str, ...], list[tuple[str, str, str, str, float]]] = {}
        for row in kept:
            by_key.setdefault(row[:4], []).append(row)
        assert by_key == first and len(first) == 4  # a and b, on big and small
        assert len(kept) < len(whole) and {r[0] for r in kept} == {"w"}
        assert learn(kept) == learn(whole) != []
    finally:
        store.close()
