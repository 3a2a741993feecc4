"""WfFormat traces become hetflow workflows by the bench rules (bench/data/README.md 2 and 3)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from bench.data import TRACES

from hetflow.errors import SpecError
from hetflow.plan.build import build_instance
from hetflow.plan.instance import Edge, MachineClass
from hetflow.spec import Resources
from hetflow.spec.fields.resources import MIN_MEMORY
from hetflow.spec.load.loader import parse_workflow
from hetflow.spec.load.wfcommons import (
    PLACEHOLDER_IMAGE,
    TraceTask,
    category_of,
    convert_wfcommons,
    gpu_categories,
    read_trace,
    step_names,
    workflow_from_wfcommons,
)
from hetflow.spec.models import NAME_RE
from tests.unit.builders import GIB

ONE = (MachineClass("m", 1, 64, 512 * GIB, gpus=1),)

# --- a small hand-written trace ---------------------------------------------------------


def task(
    tid: str, parents: tuple[str, ...] = (), inputs: tuple[str, ...] = (), outputs: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {"name": tid, "id": tid, "parents": list(parents), "inputFiles": list(inputs), "outputFiles": list(outputs)}


def run(tid: str, seconds: float, **extra: object) -> dict[str, Any]:
    return {"id": tid, "runtimeInSeconds": seconds, **extra}


def trace(tasks: list[dict[str, Any]], runs: list[dict[str, Any]], files: dict[str, int]) -> dict[str, Any]:
    return {
        "name": "Tiny Trace",
        "schemaVersion": "1.5",
        "workflow": {
            "specification": {"tasks": tasks, "files": [{"id": f, "sizeInBytes": n} for f, n in files.items()]},
            "execution": {"tasks": runs},
        },
    }


# split -> work x2 -> Merge; Merge also needs split without reading from it.
# Run times: split 10, work 200 (the largest), Merge 60 (22% of 270: over 20%).
TINY = trace(
    [
        task("split_ID01", inputs=("in.dat",), outputs=("a.part", "b.part")),
        task("work_ID02", ("split_ID01",), ("a.part",), ("a.out",)),
        task("work_ID03", ("split_ID01",), ("b.part",), ("b.out",)),
        task("Merge_ID04", ("work_ID02", "work_ID03", "split_ID01"), ("a.out", "b.out"), ("final",)),
    ],
    [
        run("split_ID01", 10, coreCount=2, memoryInBytes=2_000_000_000),
        run("work_ID02", 100),
        run("work_ID03", 100.0, coreCount=4),
        run("Merge_ID04", 60, memoryInBytes=123),
    ],
    {"in.dat": 7, "a.part": 100, "b.part": 200, "a.out": 1000, "b.out": 2000, "final": 5},
)


def test_tiny_trace_steps() -> None:
    wf = workflow_from_wfcommons(TINY)

    assert wf.name == "tiny-trace"
    assert list(wf.steps) == ["split_id01", "work_id02", "work_id03", "merge_id04"]
    split = wf.steps["split_id01"].resolved_variants()
    assert list(split) == ["default"]  # no GPU variant: 10 s of 270 is under 20%
    assert split["default"].resources == Resources(cpus=2, memory=2_000_000_000)
    assert split["default"].estimate == 10
    assert split["default"].image == PLACEHOLDER_IMAGE and split["default"].command == ("true",)
    assert split["default"].env == {"WFCOMMONS_TASK": "split_ID01", "WFCOMMONS_CATEGORY": "split"}

    work = wf.steps["work_id03"].resolved_variants()
    assert list(work) == ["cpu", "gpu"]
    assert (work["cpu"].resources, work["cpu"].estimate) == (Resources(cpus=4, memory=GIB), 100)
    assert (work["gpu"].resources, work["gpu"].estimate) == (Resources(cpus=2, memory=GIB, gpus=1), 100 / 8.5)

    merge = wf.steps["merge_id04"]
    assert set(merge.resolved_variants()) == {"cpu", "gpu"}  # 60 of 270 s: at least 20%
    assert merge.resolved_variants()["cpu"].resources.memory == MIN_MEMORY  # 123 B, raised to what podman accepts
    assert merge.needs == ("split_id01",)
    assert merge.inputs == {"a_out": "work_id02/a.out", "b_out": "work_id03/b.out"}
    assert wf.steps["split_id01"].sizes == {"a.part": 100, "b.part": 200}


def test_tiny_trace_edges_carry_the_files_read() -> None:
    inst = build_instance(workflow_from_wfcommons(TINY), ONE, bandwidth=1.0)

    assert set(inst.edges) == {
        Edge("split_id01", "work_id02", 100),
        Edge("split_id01", "work_id03", 200),
        Edge("work_id02", "merge_id04", 1000),
        Edge("work_id03", "merge_id04", 2000),
        Edge("split_id01", "merge_id04", 0),
    }


def test_cpu_only_conversion_has_no_variants() -> None:
    wf = workflow_from_wfcommons(TINY, gpu_variants=False)
    assert all(step.variants is None for step in wf.steps.values())


def test_yaml_text_loads_as_a_workflow_without_problems() -> None:
    text = convert_wfcommons(TINY)

    assert text.startswith("# Converted from the WfFormat trace 'Tiny Trace'")
    loaded = parse_workflow(text, "tiny.yaml")
    assert loaded.notes == ()
    assert loaded.workflow == workflow_from_wfcommons(TINY)


CATEGORIES = [
    pytest.param("individuals_ID0000001", "individuals", id="plain"),
    pytest.param("individuals_merge_ID0000011", "individuals_merge", id="underscores"),
    pytest.param("chr21", "chr21", id="no-id"),
    pytest.param("map_ID12_ID0000003", "map_ID12", id="only-the-trailing-id"),
    pytest.param("x_id0001", "x_id0001", id="case-sensitive"),
]


@pytest.mark.parametrize(("name", "category"), CATEGORIES)
def test_category_of(name: str, category: str) -> None:
    assert category_of(name) == category


def tt(category: str, runtime: float) -> TraceTask:
    return TraceTask(category, category, runtime, 1.0, GIB, (), (), ())


GPU_RULE = [
    pytest.param({"a": 80, "b": 20}, ("a", "b"), id="exactly-20pc"),
    pytest.param({"a": 81, "b": 19}, ("a",), id="just-under"),
    pytest.param({"a": 40, "b": 30, "c": 30}, ("a", "b", "c"), id="three"),
    pytest.param({"b": 50, "a": 50}, ("b", "a"), id="tie-keeps-trace-order"),
    pytest.param({"a": 0}, ("a",), id="all-zero"),
]


@pytest.mark.parametrize(("totals", "expected"), GPU_RULE)
def test_gpu_categories(totals: dict[str, float], expected: tuple[str, ...]) -> None:
    assert gpu_categories([tt(c, r) for c, r in totals.items()]) == expected


def test_step_names_are_valid_deterministic_and_distinct() -> None:
    long = "fastqSplit_fastqSplit_080603_ILMN-GA001_0003_205WWAAXX_TAQ1_s_5_sequence_ID0000001"
    ids = ["A_ID1", "a_id1", "x/y z", long, long + "0", "__", "ok"]
    names = step_names(ids)

    assert names["A_ID1"] == "a_id1"
    assert names["a_id1"].startswith("a_id1-") and names["a_id1"] != "a_id1"
    assert names["x/y z"] == "x-y-z"
    assert names["__"] == "task"
    assert len(set(names.values())) == len(ids)
    assert all(NAME_RE.match(n) for n in names.values())
    assert len(names[long]) == 63 and names[long] != names[long + "0"]
    assert step_names(ids) == names


BAD_TRACES = [
    pytest.param({"workflow": {}}, "workflow: needs 'specification' and 'execution' objects", id="not-wfformat"),
    pytest.param(
        trace([task("a")], [], {}),
        "workflow.specification.tasks[0]: task 'a' has no execution entry with 'runtimeInSeconds'",
        id="no-runtime",
    ),
    pytest.param(
        trace([task("a", ("ghost",))], [run("a", 1)], {}),
        "workflow.specification.tasks[0].parents: names unknown task 'ghost'",
        id="unknown-parent",
    ),
    pytest.param(
        trace([task("a"), task("a")], [run("a", 1)], {}),
        "workflow.specification.tasks[1]: task id 'a' appears twice",
        id="duplicate-id",
    ),
    pytest.param(trace([], [], {}), "workflow.specification.tasks: missing or empty", id="no-tasks"),
]


@pytest.mark.parametrize(("data", "message"), BAD_TRACES)
def test_bad_traces_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as exc:
        read_trace(data, "t.json")
    assert str(exc.value) == f"t.json:1: error: {message} (expected WfFormat 1.5, as in WfInstances)"


# --- the five real traces of the benchmark ----------------------------------------------

REAL = [
    pytest.param("1000genome-chameleon-2ch-100k-001", 52, ("frequency", "individuals"), 34, id="1000genome"),
    pytest.param("montage-chameleon-2mass-005d-001", 58, ("mProject",), 12, id="montage"),
    pytest.param("blast-chameleon-medium-001", 303, ("blastall",), 300, id="blast"),
    pytest.param("bwa-chameleon-large-001", 1004, ("bwa",), 1000, id="bwa"),
    # The rule strips only a trailing _ID<digits>: epigenomics names carry the lane and the
    # chunk, so every task is its own category and only the single longest gets a GPU variant.
    pytest.param(
        "epigenomics-chameleon-ilmn-6seq-50k-001",
        1695,
        ("fastqSplit_fastqSplit_080603_ILMN-GA001_0003_205WWAAXX_TAQ1_s_5_sequence",),
        1,
        id="epigenomics",
    ),
]


def expected_edges(data: dict[str, Any]) -> dict[tuple[str, str], int]:
    """Bench rule 2 computed straight from the JSON: files the child reads and the parent writes."""
    spec = data["workflow"]["specification"]
    sizes = {f["id"]: f["sizeInBytes"] for f in spec["files"]}
    writes = {t["id"]: set(t["outputFiles"]) for t in spec["tasks"]}
    return {
        (p, t["id"]): sum(sizes[f] for f in set(t["inputFiles"]) & writes[p])
        for t in spec["tasks"]
        for p in t["parents"]
    }


@pytest.mark.parametrize(("name", "tasks", "gpu_cats", "gpu_steps"), REAL)
def test_real_traces(name: str, tasks: int, gpu_cats: tuple[str, ...], gpu_steps: int) -> None:
    data = json.loads((TRACES / f"{name}.json").read_text())

    assert gpu_categories(read_trace(data).tasks) == gpu_cats
    text = convert_wfcommons(data, file=name)
    wf = parse_workflow(text, name).workflow
    assert len(wf.steps) == tasks
    assert sum(1 for s in wf.steps.values() if s.variants) == gpu_steps

    inst = build_instance(wf, ONE, bandwidth=1.0)
    ids = {s: step.env["WFCOMMONS_TASK"] for s, step in wf.steps.items()}
    got = {(ids[e.parent], ids[e.child]): e.bytes for e in inst.edges}
    assert got == expected_edges(data)
