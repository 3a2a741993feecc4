"""Where a cluster's plan puts a CWL job (``cwl.placement.cluster_places``, ``place_of``) and
how a CWL run is told from a hetflow workflow's (``cwl.control.cwl_invocation``): pure."""

from __future__ import annotations

import json

from hetflow.cwl.control import cwl_invocation
from hetflow.cwl.placement import ClusterPlace, cluster_places, place_of
from hetflow.plan import MachineClass, Placement
from hetflow.state import RunRecord

A100 = MachineClass(name="hf-a100", count=1, cores=2, memory=2**30, gpus=2, gpu_model="NVIDIA A100-SXM4-40GB")
CPUS = MachineClass(name="cpu.std", count=4, cores=8, memory=2**30)


def _placed(cls: str, gpus: tuple[int, ...] = ()) -> Placement:
    return Placement(
        task="s", variant="default", machine=f"{cls}-0", machine_class=cls, start=0.0, finish=1.0, cores=1.0,
        memory=2**20, gpus=gpus,
    )  # fmt: skip


def test_a_class_of_one_node_pins_it_and_a_gpu_step_asks_for_its_model() -> None:
    places = cluster_places({"train": _placed("hf-a100", (0,)), "prep": _placed("cpu.std")}, [A100, CPUS])
    assert places["train"] == ClusterPlace(None, "hf-a100", "NVIDIA A100-SXM4-40GB", "planned on hf-a100")
    assert places["prep"] == ClusterPlace("cpu.std", None, None, "planned on cpu.std")


def test_a_cpu_step_on_a_gpu_node_asks_for_no_gpu_model() -> None:
    assert cluster_places({"prep": _placed("hf-a100")}, [A100])["prep"].gpu_model is None


def test_a_job_finds_its_step_by_name_scatter_item_and_subworkflow() -> None:
    a, b = ClusterPlace("a", None, None, "a"), ClusterPlace("b", None, None, "b")
    places = {"prep": a, "sub/train": b}
    assert place_of(places, "prep") is a
    assert place_of(places, "prep_3") is a  # a scatter's item
    assert place_of(places, "train") is b
    assert place_of(places, "other") is None


def test_a_name_two_subworkflows_share_is_left_to_the_scheduler() -> None:
    places = {"x/train": ClusterPlace("a", None, None, ""), "y/train": ClusterPlace("b", None, None, "")}
    assert place_of(places, "train") is None


def _record(spec: object) -> RunRecord:
    return RunRecord(
        id="r1", name="wf", workflow_file="wf.cwl", state="stopped", created=0.0, started=None, ended=None,
        pid=None, uid=0, gid=0, workdir="/w", spec_json=json.dumps(spec), params_json="{}", message="",
    )  # fmt: skip


def test_a_cwl_run_keeps_its_runner_arguments_and_folder() -> None:
    spec = {"cwl": "wf.cwl", "steps": {}, "argv": ["wf.cwl", "in.yml"], "cwd": "/data"}
    assert cwl_invocation(_record(spec)) == (["wf.cwl", "in.yml"], "/data")
    assert cwl_invocation(_record({"apiVersion": "hetflow/v1", "steps": {}})) is None
