"""tools/gpu-check, the real-GPU acceptance check, on what can be checked without a GPU:
its comparison of hetflow's discovery with nvidia-smi, the judging of the injection run,
the slowdown fit, the report, the kit verification and its arguments.

The nvidia-smi, hetflow and CUDA outputs under data/gpu-check/h100 and docs/gpu-runs are
real: they came from the check's run on an NVIDIA H100 on 2026-11-27 (docs/guides/
real-gpu.md).  Where a test changes one, it says so."""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from hetflow.plan import learn_slowdown

ROOT = Path(__file__).resolve().parents[2]
H100 = Path(__file__).parent / "data" / "gpu-check" / "h100"
RUN = ROOT / "docs" / "gpu-runs" / "2026-11-27-h100"


def _load() -> ModuleType:
    """tools/gpu_check, the package tools/gpu-check runs (from the folder it sits in)."""
    package = ROOT / "tools" / "gpu_check"
    spec = importlib.util.spec_from_file_location(
        "gpu_check", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = mod  # its modules import each other through it; dataclasses look it up
    spec.loader.exec_module(mod)
    return mod


gc = _load()


def h100_rows(**gpu_changes: Any) -> list[dict[str, Any]]:
    node = json.loads((H100 / "nodes.json").read_text())[0]
    node["gpus"][0].update(gpu_changes)
    return list(
        gc.compare_discovery(
            node,
            gc.parse_query((H100 / "smi-query.csv").read_text()),
            gc.parse_smi_xml((H100 / "smi.xml").read_text()),
            gc.parse_topo((H100 / "smi-topo.txt").read_text()),
        )
    )


def test_the_h100s_discovery_agreed_with_nvidia_smi_except_numa_and_architecture() -> None:
    # nodes.json came from the hetflow of that day: no NUMA node (NVML and sysfs said -1) and no
    # architecture name; both were fixed after it (inventory.nvml.numa_of_cpus, nvidia_architecture)
    rows = h100_rows()
    differ = {r["field"]: (r["hetflow"], r["nvidia-smi"], r["strict"]) for r in rows if not r["match"]}
    assert differ == {"NUMA node": ("", "0", True), "architecture": ("", "Hopper", False)}
    agreed = {r["field"] for r in rows if r["match"]}
    assert {"UUID", "model", "memory (MiB)", "compute capability", "driver", "CUDA version", "MIG mode"} <= agreed
    assert {"PCI bus id", "CPU affinity"} <= agreed


def test_on_the_third_run_after_the_fixes_every_field_agreed() -> None:
    # the same check's last run that day, with the NUMA and architecture fixes (docs/gpu-runs/2026-11-27-h100-c)
    run = RUN.parent / "2026-11-27-h100-c"
    rows = gc.compare_discovery(
        json.loads((run / "nodes.json").read_text())[0],
        gc.parse_query((run / "smi-query.csv").read_text()),
        gc.parse_smi_xml((run / "smi.xml").read_text()),
        gc.parse_topo((run / "smi-topo.txt").read_text()),
    )
    assert len(rows) == 12 and [r["field"] for r in rows if not r["match"]] == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"memory_bytes": 80 << 30}, "memory (MiB)"),
        ({"compute_capability": "8.0"}, "compute capability"),
        ({"cuda_version": "12.4"}, "CUDA version"),
        ({"mig_enabled": True}, "MIG mode"),
        ({"cpu_affinity": "0-7"}, "CPU affinity"),
    ],
    ids=["memory", "capability", "cuda", "mig", "affinity"],
)
def test_a_field_that_differs_is_caught(change: dict[str, Any], field: str) -> None:
    bad = [r["field"] for r in h100_rows(numa_node=0, **change) if not r["match"] and r["strict"]]
    assert bad == [field]


TWO_NVLINK = (
    "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV12\t0-31\t0\t\tN/A\n"
    "GPU1\tNV12\t X \t0-31\t0\t\tN/A\n"
)


def test_topology_parses_links_and_affinities() -> None:
    real = gc.parse_topo((H100 / "smi-topo.txt").read_text())  # escapes and all
    assert real == {"gpus": {"GPU0": {"links": {}, "cpu_affinity": "0-15", "numa_affinity": "0"}}}
    two = gc.parse_topo(TWO_NVLINK)["gpus"]
    assert two["GPU0"] == {"links": {"GPU1": "NV12"}, "cpu_affinity": "0-31", "numa_affinity": "0"}


def test_links_compare_nvlink_counts_as_nvidia_smi_prints_them() -> None:
    node = {"gpus": [{"uuid": f"GPU-{i}", "cpu_affinity": "0-31"} for i in range(2)]}
    node["gpu_links"] = [{"a": 0, "b": 1, "kind": "NV", "nvlinks": 12}]
    query = [{k: "" for k in gc.QUERY.split(",")} | {"index": str(i), "uuid": f"GPU-{i}"} for i in range(2)]
    rows = gc.compare_discovery(node, query, {"cuda_version": "", "gpus": {}}, gc.parse_topo(TWO_NVLINK))
    assert [r["match"] for r in rows if r["field"] == "links"] == [True, True]
    node["gpu_links"] = [{"a": 0, "b": 1, "kind": "SYS", "nvlinks": 0}]
    rows = gc.compare_discovery(node, query, {"cuda_version": "", "gpus": {}}, gc.parse_topo(TWO_NVLINK))
    assert [r["match"] for r in rows if r["field"] == "links"] == [False, False]


# --- sharing -------------------------------------------------------------------------------


def test_the_h100s_shared_runs_fit_by_hetflows_learn_slowdown() -> None:
    modes = json.loads((RUN / "slowdown.json").read_text())["modes"]
    for mode, want in (("time-slicing", 1.161), ("mps", 0.969)):
        times = {int(k): v for k, v in modes[mode]["times"].items()}
        s = gc.fit_slowdown(gc.sharing_samples(times), learn_slowdown)
        assert s == pytest.approx(want, abs=0.001)


def test_the_models_own_point_gives_its_default() -> None:
    # the seed's measurement: 28.7 s shared by two, 14.6 s alone
    assert gc.fit_slowdown(gc.sharing_samples({1: [14.6], 2: [28.7, 28.7]}), learn_slowdown) == pytest.approx(
        0.966, abs=0.001
    )


def test_loop_times_are_read_from_each_process_and_a_silent_one_fails() -> None:
    assert gc.loop_seconds(["loop n=2048 iters=400 seconds=1.2706 gpu=NVIDIA H100 80GB HBM3 devices=1\n"]) == [1.2706]
    with pytest.raises(gc.CheckError, match="printed no time"):
        gc.loop_seconds(["cuda error: out of memory (cudaMalloc(&a, bytes))\n"])
    with pytest.raises(gc.CheckError, match="no solo run"):
        gc.sharing_samples({2: [2.0, 2.0]})


# --- injection -----------------------------------------------------------------------------

LOGS = (RUN / "injection-logs.txt").read_text()
USE = {"gpu_util_mean": 80.1, "gpu_util_max": 100.0, "gpu_memory_peak": 593494016, "gpu_memory_of": "process"}


def test_the_h100_injection_run_passes() -> None:
    wrong, seen = gc.judge_injection(gc.step_lines(LOGS, "gpu"), gc.step_lines(LOGS, "cpu"), 0, USE)
    assert wrong == []
    assert seen["devices"] == ["nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidiactl"]
    assert seen["hardening"] == {"CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}


@pytest.mark.parametrize(
    ("gpu_edit", "cpu_edit", "use", "said"),
    [
        (("nvidia0", "nvidia0\nnvidia1"), None, USE, "expected only nvidia0"),
        (("CapEff:\t0000000000000000", "CapEff:\t00000000a80425fb"), None, USE, "not hardened"),
        (("ok n=1024", "wrong: 5 of"), None, USE, "did not print its checked result"),
        (None, ("null", "null\nnvidia0"), USE, "CPU step sees NVIDIA"),
        (None, ("check-exit=2", "ok n=64\ncheck-exit=0"), USE, "found a GPU in the CPU step"),
        (None, None, {**USE, "gpu_util_max": None}, "holds no GPU use"),
    ],
    ids=["another-gpu", "capabilities", "wrong-result", "cpu-sees-gpu", "cpu-runs-cuda", "no-usage"],
)
def test_each_broken_promise_is_named(
    gpu_edit: tuple[str, str] | None, cpu_edit: tuple[str, str] | None, use: dict[str, Any], said: str
) -> None:
    gpu, cpu = gc.step_lines(LOGS, "gpu"), gc.step_lines(LOGS, "cpu")
    if gpu_edit:
        gpu = gpu.replace(*gpu_edit)
    if cpu_edit:
        cpu = cpu.replace(*cpu_edit)
    wrong, _ = gc.judge_injection(gpu, cpu, 0, use)
    assert len(wrong) == 1 and said in wrong[0]


def test_why_nccl_refused_is_the_line_after_last_error() -> None:
    tried = json.loads((RUN / "gpu-check.json").read_text())["parts"][3]["details"]["tried"]
    assert gc.why_refused(tried[0]["output"][0]) == "Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60"


# --- the report ----------------------------------------------------------------------------


def test_the_report_is_a_markdown_table_and_exit_needs_every_part_that_ran() -> None:
    parts = [gc.Part("discovery", "passed", 4.2, "12 of 12"), gc.Part("sharing", "skipped", summary="dry run")]
    text = gc.markdown({"date": "d", "device": {"gpu": "H100"}, "parts": [vars(p) for p in parts]})
    assert "| discovery | passed | 4.2 | 12 of 12 |" in text and "| sharing | skipped |" in text
    assert gc.overall(parts) == 0
    assert gc.overall([*parts, gc.Part("gang", "failed", error="x")]) == 1
    assert gc.overall([gc.Part("gang", "skipped")]) == 1  # nothing ran: nothing passed


# --- the kit -------------------------------------------------------------------------------


def _wheel(path: Path, name: str, requires: list[str]) -> None:
    with zipfile.ZipFile(path, "w") as z:
        meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
        z.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\n{meta}")


def make_kit(root: Path) -> Path:
    """A kit folder with every piece the dry run looks for (stand-ins, not the real files)."""
    kit = root / "kit"
    (kit / "wheels").mkdir(parents=True)
    (kit / "debs").mkdir()
    _wheel(
        kit / "wheels" / "hetflow-0.1.0-py3-none-any.whl",
        "hetflow",
        ["pydantic>=2.6", "PyYAML>=6", "ray; extra == 'ray'"],
    )
    _wheel(kit / "wheels" / "pydantic-2.14.4-py3-none-any.whl", "pydantic", [])
    _wheel(kit / "wheels" / "pyyaml-6.0.4-cp312-cp312-manylinux2014_x86_64.whl", "pyyaml", [])
    for d in gc.NEEDED_DEBS:
        (kit / "debs" / f"{d}_1.0_amd64.deb").write_bytes(b"!<arch>\n")
    with tarfile.open(kit / "image.oci.tar", "w") as t:
        for name, data in (("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'), ("index.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    (kit / "gpu-check").write_text("#!/usr/bin/env python3\n")
    shutil.copytree(ROOT / "tools" / "gpu_check", kit / "gpu_check", ignore=shutil.ignore_patterns("__pycache__"))
    (kit / "check.cu").write_text("int main() { return 0; }\n")
    (kit / "sms.cu").write_text("int main() { return 0; }\n")
    (kit / "ckpt.cu").write_text("int main() { return 0; }\n")
    (kit / "criu" / "lib").mkdir(parents=True)
    (kit / "criu" / "criu").write_bytes(b"\x7fELF")
    for lib in gc.CRIU_LIBS:
        (kit / "criu" / "lib" / lib).write_bytes(b"\x7fELF")
    gc.write_manifest(kit)
    return kit


def test_a_complete_kit_passes_the_dry_run(tmp_path: Path) -> None:
    kit = make_kit(tmp_path)
    assert gc.verify_kit(kit) == []
    out = tmp_path / "out"
    assert gc.main(["--dry-run", "--kit", str(kit), str(out)]) == 0
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["mode"] == "dry-run"
    assert [(p["name"], p["status"]) for p in report["parts"]][:2] == [("kit", "passed"), ("discovery", "skipped")]
    assert (out / "gpu-check.md").read_text().startswith("### gpu-check")


def _change(kit: Path, what: str) -> str:
    if what == "tampered":
        (kit / "check.cu").write_text("changed\n")
        return "check.cu: differs from MANIFEST.json"
    if what == "dependency":
        (kit / "wheels" / "pydantic-2.14.4-py3-none-any.whl").unlink()
        gc.write_manifest(kit)
        return "hetflow needs pydantic"
    if what == "ray":
        _wheel(kit / "wheels" / "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl", "ray", [])
        gc.write_manifest(kit)
        return "not needed there"
    if what == "cp311":
        _wheel(kit / "wheels" / "pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.whl", "pydantic_core", [])
        gc.write_manifest(kit)
        return "not installable by CPython 3.12"
    if what == "podman":
        (kit / "debs" / "podman_1.0_amd64.deb").unlink()
        gc.write_manifest(kit)
        return "no podman .deb"
    if what == "too-big":
        with (kit / "debs" / "huge_1.0_amd64.deb").open("wb") as f:
            f.truncate(65 << 20)  # sparse: no disk spent
        gc.write_manifest(kit)
        return "at most 64 MiB"
    if what == "no-module":
        (kit / "gpu_check" / "leases.py").unlink()
        gc.write_manifest(kit)
        return "gpu_check/leases.py is missing"
    if what == "no-criu-lib":
        (kit / "criu" / "lib" / "libprotobuf-c.so.1").unlink()
        gc.write_manifest(kit)
        return "criu/lib/libprotobuf-c.so.1 is missing (CRIU needs it)"
    if what == "no-criu":
        (kit / "criu" / "criu").unlink()
        gc.write_manifest(kit)
        return "criu/criu is missing: `make criu` builds CRIU 4.1.1"
    if what == "not-oci":
        with tarfile.open(kit / "image.oci.tar", "w") as t:
            t.add(kit / "check.cu", arcname="rootfs.tar")
        gc.write_manifest(kit)
        return "not an OCI archive"
    raise AssertionError(what)


@pytest.mark.parametrize(
    "what",
    ["tampered", "dependency", "ray", "cp311", "podman", "too-big", "not-oci", "no-module", "no-criu", "no-criu-lib"],
)
def test_what_is_wrong_with_a_kit_is_named(tmp_path: Path, what: str) -> None:
    kit = make_kit(tmp_path)
    said = _change(kit, what)
    problems = gc.verify_kit(kit)
    assert len(problems) == 1 and said in problems[0], problems
    assert gc.main(["--dry-run", "--kit", str(kit), str(tmp_path / "out")]) == 1


def test_the_kits_script_runs_the_package_beside_it_and_leaves_the_kit_as_listed(tmp_path: Path) -> None:
    # as on the GPU machine: `python3 gpu-kit/gpu-check`, the kit its own folder, no --kit
    kit = make_kit(tmp_path)
    shutil.copy(ROOT / "tools" / "gpu-check", kit / "gpu-check")
    gc.write_manifest(kit)
    r = subprocess.run([sys.executable, str(kit / "gpu-check"), "--dry-run"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"| kit | passed | 0.0 | {kit}: complete" in r.stdout
    assert not list(kit.rglob("__pycache__"))
    (kit / "gpu_check").rename(tmp_path / "elsewhere")
    r = subprocess.run([sys.executable, str(kit / "gpu-check"), "--dry-run"], capture_output=True, text=True)
    assert r.returncode == 2 and "no gpu_check/ beside" in r.stderr, r.stderr


def test_no_kit_folder_says_make_gpu_kit(tmp_path: Path) -> None:
    assert gc.verify_kit(tmp_path / "none") == [
        f"no kit folder at {tmp_path / 'none'}: run `make gpu-kit` (it writes ./gpu-kit)"
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--parts", "discovery,bogus", "OUT"], "unknown part(s) bogus"),
        ([], "give OUTDIR"),
        (["FILE"], "is a file; give a folder"),
    ],
    ids=["bad-part", "no-outdir", "outdir-is-a-file"],
)
def test_bad_arguments_exit_2_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    (tmp_path / "FILE").write_text("x")
    args = [str(tmp_path / a) if a in ("OUT", "FILE") else a for a in args]
    assert gc.main(args) == 2
    assert said in capsys.readouterr().err


# --- leases: hetflow's own time-slicing and MPS tenants ------------------------------------


def tenants(overlap: bool = True, gpus: tuple[str, str] = ("GPU-a", "GPU-a")) -> dict[str, Any]:
    spans = [(10.0, 14.0), (11.0, 15.0) if overlap else (14.5, 18.0)]
    return {
        "steps": [
            {
                "step": f"tenant.{i}",
                "state": "succeeded",
                "attempt_history": [{"gpu_uuids": [g], "started": a, "ended": e}],
            }
            for i, (g, (a, e)) in enumerate(zip(gpus, spans, strict=True))
        ]
    }


def tenant_log(usable: int, share: bool = True, device: int = 132) -> str:
    lines = ["CUDA_VISIBLE_DEVICES=0", "HETFLOW_GPU_SHARE=0.5" if share else "", "nvidia0", "nvidiactl"]
    lines += [
        f"sms usable={usable} device={device}",
        "loop n=2048 iters=800 seconds=2.5 gpu=NVIDIA H100 80GB HBM3 devices=1",
    ]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("mode", "usable", "clients", "shown", "share", "said"),
    [
        ("time-slicing", 132, 0, tenants(), True, ""),
        ("mps", 66, 2, tenants(), True, ""),  # as on the H100: the driver itself says 66 under MPS at 50 %
        ("mps", 132, 2, tenants(), True, "not an MPS client"),
        ("mps", 66, 1, tenants(), True, "saw 1 client(s) connect"),
        ("time-slicing", 132, 0, tenants(overlap=False), True, "did not run at the same time"),
        ("time-slicing", 132, 0, tenants(gpus=("GPU-a", "GPU-b")), True, "ran on different GPUs"),
        ("time-slicing", 132, 0, tenants(), False, "was not told its share"),
        ("time-slicing", 66, 0, tenants(), True, "may use 66 of 132 SMs"),
    ],
    ids=[
        "sliced",
        "mps",
        "mps-not-a-client",
        "mps-one-client",
        "one-after-another",
        "two-gpus",
        "no-share",
        "sliced-limited",
    ],
)
def test_two_half_gpu_tenants_are_judged(
    mode: str, usable: int, clients: int, shown: dict[str, Any], share: bool, said: str
) -> None:
    # under MPS the driver's own SM count is the client's limited one (the H100: 66/66 at 50 %)
    device = usable if mode == "mps" else 132
    logs = {f"tenant.{i}": tenant_log(usable, share, device) for i in range(2)}
    wrong, seen = gc.judge_leases(mode, logs, shown, clients, full_sms=132 if mode == "mps" else None)
    if not said:
        assert wrong == [] and seen["sms"]["tenant.0"].startswith(f"{usable}/")
    else:
        assert wrong and all(said in w for w in wrong), wrong


def test_a_failed_tenant_is_said_plainly() -> None:
    shown = tenants()
    shown["steps"][1]["state"] = "failed"
    wrong, _ = gc.judge_leases("mps", {}, shown, 0)
    assert wrong == ["mps: the tenants did not both succeed (tenant.0: succeeded, tenant.1: failed)"]


def test_tenants_taken_from_the_cache_did_not_run() -> None:
    # seen on the H100: the mps run's tenants were the time-slicing run's, cached
    shown = tenants()
    for s in shown["steps"]:
        s["attempt_history"] = []
    wrong, _ = gc.judge_leases("mps", {}, shown, 0)
    assert wrong == ["mps: the tenants did not run (taken from the cache: run with --no-cache)"]


def test_mps_clients_are_counted_from_the_daemons_control_log() -> None:
    log = (RUN.parent / "2026-11-27-h100-c" / "leases-mps-control.log").read_text()
    assert gc.mps_clients(log) == 4  # two tenants, two CUDA processes each (sms, then check)


def test_the_h100s_mps_tenants_were_mps_clients() -> None:
    # hetflow's two MPS tenants on the H100, in hardened containers: 66 of 132 SMs each
    run = RUN.parent / "2026-11-27-h100-c"
    text = (run / "leases-mps.txt").read_text()
    logs = {s: gc.step_lines(text, s) for s in ("tenant.0", "tenant.1")}
    clients = gc.mps_clients((run / "leases-mps-control.log").read_text())
    wrong, seen = gc.judge_leases("mps", logs, tenants(), clients, full_sms=132)
    assert wrong == [] and seen["sms"] == {"tenant.0": "66/66", "tenant.1": "66/66"}


REF = "00c0ffee00c0ffee"


def _attempts(first: int, result: str = REF) -> dict[int, str]:
    one = "\n".join(f"step {i} t=1700000000" for i in range(1, 60))
    two = "\n".join(f"step {i} t=1700000100" for i in range(first, 241)) + f"\nresult {result}"
    return {1: one, 2: two}


RESTORED = "hf-r-gpu-2 restored from attempt 1's checkpoint of 12:00:05 in 3.21s"


@pytest.mark.parametrize(
    ("attempts", "states", "restored", "said"),
    [
        (_attempts(48), {"gpu": "succeeded"}, RESTORED, ""),
        (_attempts(1), {"gpu": "succeeded"}, RESTORED, "attempt 2 started from step 1, not from the checkpoint"),
        (_attempts(48, "00000000deadbeef"), {"gpu": "succeeded"}, RESTORED, "differs from the uninterrupted run's"),
        (_attempts(48), {"gpu": "succeeded"}, "", "attempt 2 was not restored from a checkpoint (no note)"),
        (_attempts(48), {"gpu": "failed"}, RESTORED, "the step did not succeed after resume"),
        ({1: "step 1 t=1"}, {"gpu": "failed"}, "", "no second attempt ran"),
    ],
    ids=["continued", "from-zero", "state-lost", "not-restored", "failed", "one-attempt"],
)
def test_a_run_resumed_from_a_gpu_checkpoint_is_judged(
    attempts: dict[int, str], states: dict[str, str], restored: str, said: str
) -> None:
    wrong, seen = gc.judge_resumed("kill -9 + resume", REF, attempts, states, restored)
    if not said:
        assert wrong == [] and seen["resumed_at_step"] == 48 and seen["result"] == REF
        return
    assert any(said in w for w in wrong), wrong


def test_the_checkpoint_table_gives_size_per_gib_of_gpu_state() -> None:
    row = {"how": "kill -9 + resume", "dump_s": 1.234, "size": 1536 << 20, "state_mib": 1024, "restore_s": 2.5}
    text = gc.checkpoint_table([row], "NVIDIA H100 80GB HBM3", "580.159.04", "2026-12-08")
    assert "| NVIDIA H100 80GB HBM3 | 580.159.04 | 2026-12-08 | kill -9 + resume | 1.23 | 1536 | 1536 | 2.50 |" in text
    assert gc.steps_of("step 3 t=1\nnoise\nstep 4 t=2") == [3, 4]


def test_step_lines_read_the_log_prefixes_old_and_new() -> None:
    old = "gpu.1 | a\ncpu.1 | b\ntenant.0.1 | c"
    new = "gpu #1 | a\ncpu #1 | b\ntenant[0] | c\ntenant[1] | d\ntenant[0 x=1] #2 | e\ngpu #2 |"
    assert gc.step_lines(old, "gpu") == "a" and gc.step_lines(old, "tenant.0") == "c"
    assert gc.step_lines(new, "gpu") == "a\n" and gc.step_lines(new, "cpu") == "b"
    assert gc.step_lines(new, "tenant.0") == "c\ne" and gc.step_lines(new, "tenant.1") == "d"
