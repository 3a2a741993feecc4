"""Which OCI runtime podman is told to use (HETFLOW_OCI_RUNTIME, execute.ociruntime): the
choice from a probe's results, the cache that keeps the probe to once per machine state, and
the refusal of a runtime that is not there.  The probe is a recorded function here; the real
one runs in tests/integration/test_ociruntime.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from hetflow.errors import EngineError
from hetflow.execute.backends.local.ociruntime import (
    CACHE_KEEP,
    VARIABLE,
    ProbeResult,
    RuntimeChoice,
    choose,
    decide,
    podman_probe,
    probe_command,
)

VERSIONS = {"crun": "1.8.1", "runc": "1.1.5"}


def version(name: str) -> str:
    return VERSIONS.get(name, "")


def which_of(*installed: str) -> dict[str, str]:
    return {name: f"/usr/bin/{name}" for name in installed}


class Probe:
    """A probe that answers from a table and counts its calls."""

    def __init__(self, results: dict[str, ProbeResult]) -> None:
        self.results = results
        self.calls = 0

    def __call__(self, runtimes: Sequence[str]) -> dict[str, ProbeResult]:
        self.calls += 1
        return {rt: self.results[rt] for rt in runtimes}


def pick(
    env: dict[str, str], installed: dict[str, str], probe: Probe, cache: Path | None = None, fingerprint: str = "a"
) -> RuntimeChoice:
    return choose(env, cache, which=installed.get, probe=probe, version=version, fingerprint=fingerprint)


FAST_CRUN = {"crun": ProbeResult(0.20), "runc": ProbeResult(0.26)}


@pytest.mark.parametrize(
    ("results", "name", "reason"),
    [
        (FAST_CRUN, "crun", "faster start than runc here: 200 ms vs 260 ms"),
        (
            {"crun": ProbeResult(0.30), "runc": ProbeResult(0.25)},
            "runc",
            "faster start than crun 1.8.1 here: 250 ms vs 300 ms",
        ),
        (
            {"crun": ProbeResult(None, "crun: cgroups in hybrid mode not supported"), "runc": ProbeResult(0.25)},
            "runc",
            "crun 1.8.1 could not start a probe container: crun: cgroups in hybrid mode not supported",
        ),
        (
            {"crun": ProbeResult(0.2), "runc": ProbeResult(None, "runc: exec failed")},
            "crun",
            "runc could not start a probe container: runc: exec failed",
        ),
    ],
    ids=["crun-faster", "runc-faster", "crun-refused", "runc-refused"],
)
def test_auto_takes_the_runtime_that_started_faster(
    results: dict[str, ProbeResult], name: str, reason: str, tmp_path: Path
) -> None:
    choice = pick({}, which_of("crun", "runc"), Probe(results), tmp_path / "c.json")

    assert (choice.name, choice.reason) == (name, reason)
    assert choice.version == VERSIONS[name]
    assert choice.describe() == f"{name} {VERSIONS[name]} ({reason})"


def test_auto_without_crun_is_runc_and_probes_nothing() -> None:
    probe = Probe(FAST_CRUN)

    choice = pick({VARIABLE: "auto"}, which_of("runc"), probe)

    assert choice.describe() == "runc 1.1.5 (crun not installed)"
    assert probe.calls == 0


def test_the_probe_runs_once_per_machine_state(tmp_path: Path) -> None:
    probe, cache = Probe(FAST_CRUN), tmp_path / "cache" / "oci-runtime.json"
    installed = which_of("crun", "runc")

    first = pick({}, installed, probe, cache)
    again = pick({}, installed, probe, cache)
    assert (first, again, probe.calls) == (again, first, 1)

    probe.results = {"crun": ProbeResult(None, "refused"), "runc": ProbeResult(0.3)}
    changed = pick({}, installed, probe, cache, fingerprint="b")  # new binaries or cgroup layout: probed again
    assert (changed.name, probe.calls) == ("runc", 2)
    assert pick({}, installed, probe, cache, fingerprint="a") == first  # the earlier state is still known
    assert probe.calls == 2


def test_the_cache_keeps_the_last_machine_states(tmp_path: Path) -> None:
    probe, cache = Probe(FAST_CRUN), tmp_path / "oci-runtime.json"
    for n in range(CACHE_KEEP + 2):
        pick({}, which_of("crun", "runc"), probe, cache, fingerprint=f"f{n}")

    kept = json.loads(cache.read_text())
    assert list(kept) == [f"f{n}" for n in range(2, CACHE_KEEP + 2)]


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"a": {"name": "crun"}}', '{"a": 3}'])
def test_an_unreadable_cache_means_a_new_probe(text: str, tmp_path: Path) -> None:
    cache = tmp_path / "oci-runtime.json"
    cache.write_text(text)
    probe = Probe(FAST_CRUN)

    assert pick({}, which_of("crun", "runc"), probe, cache).name == "crun"
    assert probe.calls == 1
    assert "a" in json.loads(cache.read_text())


@pytest.mark.parametrize(
    ("wanted", "name"),
    [("runc", "runc"), ("crun", "crun"), ("/opt/rt/crun", "/opt/rt/crun"), (" runc ", "runc")],
    ids=["runc", "crun", "path", "spaces"],
)
def test_a_forced_runtime_is_used_without_a_probe(wanted: str, name: str) -> None:
    probe = Probe(FAST_CRUN)
    installed = which_of("crun", "runc") | {"/opt/rt/crun": "/opt/rt/crun"}

    choice = pick({VARIABLE: wanted}, installed, probe)

    assert (choice.name, choice.reason, probe.calls) == (name, f"{VARIABLE}={wanted.strip()}", 0)


@pytest.mark.parametrize(
    ("wanted", "says"),
    [
        ("crun", "HETFLOW_OCI_RUNTIME=crun: no such OCI runtime on PATH (apt-get install -y crun)"),
        ("youki", "HETFLOW_OCI_RUNTIME=youki: no such OCI runtime on PATH;"),
        ("/nowhere/crun", "HETFLOW_OCI_RUNTIME=/nowhere/crun: no such OCI runtime on PATH;"),
    ],
    ids=["crun-absent", "unknown-name", "missing-path"],
)
def test_a_forced_runtime_that_is_not_there_is_refused_naming_the_variable(wanted: str, says: str) -> None:
    with pytest.raises(EngineError) as exc:
        pick({VARIABLE: wanted}, which_of("runc"), Probe(FAST_CRUN))

    assert str(exc.value).startswith(says)
    assert "unset it" in str(exc.value)


def test_decide_reports_the_probe_times_it_has() -> None:
    choice = decide({"crun": ProbeResult(None, "refused"), "runc": ProbeResult(0.4321)}, version)

    assert dict(choice.probe_ms) == {"runc": 432.1}


def test_the_probe_container_has_every_steps_hardening(tmp_path: Path) -> None:
    cmd = probe_command(["podman", "--hooks-dir", "/h"], "crun", tmp_path, (), 0)

    assert cmd[:5] == ["podman", "--hooks-dir", "/h", "--runtime", "crun"]
    assert cmd[5] == "run"
    for flag in ("--cap-drop=all", "--read-only", "--rm", "no-new-privileges", "--memory", "--cpus", "--user"):
        assert flag in cmd
    assert cmd[cmd.index("--network") + 1] == "none"
    assert cmd[-3:-1] == ["--rootfs", str(tmp_path)]  # the root, then the command
    assert cmd[-1].endswith("/true")


def test_the_probe_stops_once_a_runtime_refused_and_removes_its_container(tmp_path: Path) -> None:
    """``podman_probe`` against a stand-in podman (a script) whose crun refuses as crun 1.8 does
    on a hybrid cgroup layout: crun's refusal is kept, runc is started once, the refused
    container is removed."""
    calls = tmp_path / "calls"
    fake = tmp_path / "podman"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        'case "$*" in *"--runtime crun run"*)\n'
        '  echo "Error: OCI runtime error: crun: cgroups in hybrid mode not supported" >&2; exit 126;;\n'
        "esac\n"
    )
    fake.chmod(0o755)

    results = podman_probe([str(fake)], {}, tmp_path / "cache")(["runc", "crun"])

    assert results["crun"] == ProbeResult(None, "OCI runtime error: crun: cgroups in hybrid mode not supported")
    assert results["runc"].seconds is not None and results["runc"].error == ""
    said = calls.read_text().splitlines()
    assert [line.split()[:3] for line in said] == [
        ["--runtime", "runc", "run"],
        ["--runtime", "crun", "run"],
        ["rm", "-f", "--ignore"],
    ]
    assert said[2].split()[-1] == said[1].split()[said[1].split().index("--name") + 1]


def test_without_a_writable_cache_the_probe_says_so_and_auto_stays_on_runc(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")

    results = podman_probe(["/bin/false"], {}, blocked / "cache")(["runc", "crun"])

    assert all(r.seconds is None and "cannot make the probe's root" in r.error for r in results.values())
    assert decide(results, version).name == "runc"
