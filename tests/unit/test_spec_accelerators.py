"""The accelerator request in the format: gpus / gpu_share / gpu_mig, gpu_vendor and
gpu_memory, read by every stage through ``GpuRequest``; every conflict is an error on
its line that names the field and says what to write instead."""

from __future__ import annotations

import pytest

from hetflow.errors import SpecError
from hetflow.spec import GpuRequest, Resources, mig_memory_gb, mig_profile, mig_slices
from tests.unit.builders import load, load_steps

V1 = "apiVersion: hetflow/v1\nname: wf\nsteps:\n"


def test_each_kind_of_request_reads_as_one_gpu_request() -> None:
    loaded = load_steps(
        """
        small:
          image: x
          resources: {gpu_share: 0.25, gpu_memory: 4Gi}
        sliced:
          image: x
          resources: {gpu_mig: 1G.10GB}
        rocm:
          image: x
          resources: {gpus: 2, gpu_vendor: amd}
        cpu: {image: x}
        """
    )
    req = {n: s.resolved_variants()["default"].gpu_request for n, s in loaded.workflow.steps.items()}
    assert req["small"] == GpuRequest(count=0, vendor="nvidia", share=0.25, memory=4 * 1024**3)
    assert (req["small"].kind, req["small"].devices, req["small"].whole) == ("share", 1, False)
    assert req["sliced"] == GpuRequest(mig="1g.10gb")  # profile names are lower-cased, as nvidia-smi prints them
    assert (req["rocm"].kind, req["rocm"].vendor, req["rocm"].devices) == ("whole", "amd", 2)
    assert (req["cpu"].kind, req["cpu"].any) == ("none", False)
    assert [s.resolved_variants()["default"].uses_gpu for s in loaded.workflow.steps.values()] == [
        True,
        True,
        True,
        False,
    ]
    assert req["small"].describe() == "0.25 of one nvidia GPU"
    assert req["sliced"].describe() == "a MIG 1g.10gb instance"


def test_gpu_memory_and_the_constraints_min_memory_both_count_the_larger_wins() -> None:
    step = load_steps(
        """
        t:
          image: x
          resources: {gpus: 1, gpu_memory: 16Gi}
          gpu: {min_memory: 24Gi}
        """
    ).workflow.steps["t"]
    assert step.resolved_variants()["default"].gpu_request.memory == 24 * 1024**3


def test_mig_profile_helpers() -> None:
    assert (mig_profile(" 3G.40GB "), mig_slices("3g.40gb"), mig_memory_gb("3g.40gb")) == ("3g.40gb", 3, 40)
    assert mig_profile("1g.10gb+me") == "1g.10gb+me"
    for bad in ("8g.10gb", "1g", "mig-1g.10gb", "1g.10"):
        with pytest.raises(ValueError, match="is not a MIG profile"):
            mig_profile(bad)


BAD = [
    pytest.param("{gpus: 1, gpu_share: 0.5}", "give exactly one of gpus, gpu_share or gpu_mig", id="gpus-and-share"),
    pytest.param("{gpu_share: 0.5, gpu_mig: 1g.10gb}", "not gpu_share and gpu_mig", id="share-and-mig"),
    pytest.param("{gpu_share: 1}", "between 0 and 1 (exclusive), e.g. 0.25; got 1; for whole GPUs", id="share-1"),
    pytest.param("{gpu_share: 0}", "between 0 and 1", id="share-0"),
    pytest.param("{gpu_share: -0.5}", "between 0 and 1", id="share-negative"),
    pytest.param("{gpu_share: .nan}", "between 0 and 1", id="share-nan"),
    pytest.param("{gpu_share: true}", "between 0 and 1", id="share-bool"),
    pytest.param("{gpu_share: quarter}", "between 0 and 1", id="share-word"),
    pytest.param("{gpu_share: 0.001}", "below 0.01", id="share-tiny"),
    pytest.param("{gpu_mig: 2g}", "'2g' is not a MIG profile", id="mig-malformed"),
    pytest.param("{gpu_mig: 9g.10gb}", "is not a MIG profile", id="mig-9-slices"),
    pytest.param("{gpu_mig: 1g.10gb, gpu_vendor: amd}", "gpu_vendor amd has no MIG", id="mig-amd"),
    pytest.param("{gpu_vendor: amd}", "gpu_vendor: amd asks for no GPU", id="vendor-without-gpu"),
    pytest.param("{gpu_vendor: rocm, gpus: 1}", "'nvidia', 'amd', 'intel' or 'any'", id="vendor-unknown"),
    pytest.param("{gpu_memory: 8Gi}", "gpu_memory asks for no GPU", id="memory-without-gpu"),
    pytest.param("{gpu_mig: 1g.10gb, gpu_memory: 20Gi}", "more than MIG profile 1g.10gb holds", id="memory-over-mig"),
    pytest.param("{gpus: 1, gpu_memory: lots}", "gpu_memory", id="memory-word"),
]


@pytest.mark.parametrize(("resources", "phrase"), BAD)
def test_a_bad_accelerator_request_is_an_error_on_its_line(resources: str, phrase: str) -> None:
    with pytest.raises(SpecError) as info:
        load(V1 + f"  t:\n    image: x\n    resources: {resources}\n")
    errors = [p for p in info.value.problems if p.severity == "error"]
    assert [(p.file, p.line) for p in errors] == [("wf.yaml", 6)], errors
    assert phrase in errors[0].message, errors[0].message


def test_a_gang_takes_whole_gpus_only() -> None:
    with pytest.raises(SpecError) as info:
        load(V1 + "  t:\n    image: x\n    resources: {gpu_share: 0.5}\n    gang: {replicas: 2}\n")
    (problem,) = [p for p in info.value.problems if p.severity == "error"]
    assert problem.line == 7
    assert "a gang's replicas take whole GPUs, but variant(s) 'default' ask for gpu_share or gpu_mig" in problem.message


def test_the_resources_model_defaults_stay_whole_nvidia() -> None:
    r = Resources()
    got = (r.gpus, r.gpu_share, r.gpu_mig, r.gpu_vendor, r.gpu_memory, r.uses_gpu)
    assert got == (0, None, None, "nvidia", 0, False)
