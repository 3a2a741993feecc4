"""The example apps, run on the HOST with small parameters, exactly as their workflow
files call them (paths /app, /in and /out mapped to folders here): the numbers they
write are checked against independent computations.  The last test runs them in the
NumPy image the way hetflow's runner does (that one needs podman)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

np = pytest.importorskip("numpy", reason="the example apps need numpy on the host: pip install numpy")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SMALL_CIRCUIT = {"seed": 3, "gates": 1500, "inputs": 24, "outputs": 12, "vectors": 2048, "clock_ps": 1e6}


# --- running a workflow's commands on the host ---------------------------------------------


def host_args(example: str, step: str, spec: Mapping[str, Any], params: Mapping[str, Any], work: Path) -> list[str]:
    """The step's command with params filled in and container paths mapped to ``work``:
    /app/EXAMPLE -> examples/EXAMPLE/app, /in/NAME/FILE -> work/PRODUCER/FILE, /out -> work/STEP."""
    command = spec["variants"]["cpu"]["command"] if "variants" in spec else spec["command"]
    inputs = {name: ref.split("/", 1)[0] for name, ref in spec.get("inputs", {}).items()}
    args = []
    for raw in command:
        arg = re.sub(r"\{\{\s*params\.(\w+)\s*\}\}", lambda m: str(params[m[1]]), str(raw))
        arg = arg.replace(f"/app/{example}/", f"{EXAMPLES / example / 'app'}/")
        if arg.startswith("/in/"):
            _, _, name, rest = arg.split("/", 3)
            arg = str(work / inputs[name] / rest)
        arg = arg.replace("/out/", f"{work / step}/")
        args.append(arg)
    assert args[0] == "python3"
    # litho is GPU-only in the workflow; its NumPy path is what can be checked here.
    return [sys.executable, *[a for a in args[1:] if a != "--gpu"]]


def run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def run_workflow(example: str, work: Path, overrides: Mapping[str, Any]) -> dict[str, str]:
    """Run every step in file order (which is a topological order); returns stdouts."""
    wf = yaml.safe_load((EXAMPLES / example / "workflow.yaml").read_text())
    params = {**wf["params"], **overrides}
    outputs = {}
    for step, spec in wf["steps"].items():
        assert all((work / need).is_dir() for need in spec.get("needs", [])), f"{step} runs before its needs"
        (work / step).mkdir(parents=True)
        outputs[step] = run(host_args(example, step, spec, params, work)).stdout
        for name in spec["outputs"]:
            assert (work / step / name).is_file(), f"{step} did not write its declared output {name}"
    return outputs


@pytest.fixture
def app_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, ModuleType]]:
    """The circuit and meanpool scripts as modules, importable for direct checks."""
    import importlib

    names = ["common", "netlist", "synthesize", "place", "route", "simulate", "signoff", "litho", "pool"]
    monkeypatch.syspath_prepend(str(EXAMPLES / "meanpool" / "app"))
    monkeypatch.syspath_prepend(str(EXAMPLES / "circuit" / "app"))
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    yield {name: importlib.import_module(name) for name in names}
    for name in names:
        sys.modules.pop(name, None)
    sys.modules.update(saved)


# --- meanpool ------------------------------------------------------------------------------------


def reference_pool(x: Any, window: int, iterations: int) -> Any:
    """Mean over the window x window block starting at each element, wrapping: np.roll."""
    x = x.astype(np.float64)
    for _ in range(iterations):
        x = sum(np.roll(x, (-dy, -dx), axis=(0, 1)) for dy in range(window) for dx in range(window)) / window**2
    return x


def test_meanpool_workflow_on_host_pools_and_keeps_the_mean(tmp_path: Path) -> None:
    out = run_workflow("meanpool", tmp_path, {"size": 96, "iterations": 5, "seed": 7})
    matrix = np.load(tmp_path / "generate/matrix.npy")
    pooled = np.load(tmp_path / "pool/pooled.npy")
    assert matrix.shape == pooled.shape == (96, 96)
    assert matrix.dtype == pooled.dtype == np.float32
    assert matrix.min() >= 0.0 and matrix.max() < 1.0
    np.testing.assert_allclose(pooled, reference_pool(matrix, 4, 5), rtol=1e-5, atol=1e-6)
    assert abs(float(pooled.mean()) - float(matrix.mean())) < 1e-5, "wrap-around pooling keeps the mean"
    assert pooled.std() < matrix.std() / 3
    assert re.search(r"5 x 4x4 mean pooling of 96x96 float32: [\d.]+s compute", out["pool"])
    assert f"numpy {np.__version__}" in out["pool"]


@pytest.mark.parametrize("window", [2, 3, 5])
def test_pool_window_on_a_non_square_matrix(tmp_path: Path, window: int) -> None:
    """Rows != columns catches a pooling step that mixes up its axes."""
    x = np.random.default_rng(window).random((17, 23), dtype=np.float32)
    np.save(tmp_path / "in.npy", x)
    script = EXAMPLES / "meanpool/app/pool.py"
    run(
        [
            sys.executable,
            str(script),
            "--window",
            str(window),
            "--iterations",
            "3",
            "--in",
            str(tmp_path / "in.npy"),
            "--out",
            str(tmp_path / "out.npy"),
        ]
    )
    np.testing.assert_allclose(np.load(tmp_path / "out.npy"), reference_pool(x, window, 3), rtol=1e-5, atol=1e-6)


def test_generate_is_seeded(tmp_path: Path) -> None:
    script = str(EXAMPLES / "meanpool/app/generate.py")
    for name, seed in (("a", 1), ("b", 1), ("c", 2)):
        run([sys.executable, script, "--size", "8", "--seed", str(seed), "--out", str(tmp_path / f"{name}.npy")])
    a, b, c = (np.load(tmp_path / f"{n}.npy") for n in "abc")
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_pool_gpu_without_cupy_fails_with_a_message(tmp_path: Path) -> None:
    try:
        import cupy  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("CuPy is installed here; this checks the message when it is not")
    np.save(tmp_path / "in.npy", np.zeros((4, 4), np.float32))
    done = run(
        [
            sys.executable,
            str(EXAMPLES / "meanpool/app/pool.py"),
            "--gpu",
            "--in",
            str(tmp_path / "in.npy"),
            "--out",
            str(tmp_path / "out.npy"),
        ],
        check=False,
    )
    assert done.returncode != 0 and "--gpu needs CuPy" in done.stderr
    assert not (tmp_path / "out.npy").exists()


# --- circuit ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def circuit(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    work = tmp_path_factory.mktemp("circuit")
    return work, run_workflow("circuit", work, SMALL_CIRCUIT)


def load(path: Path) -> dict[str, Any]:
    with np.load(path) as data:
        return {key: data[key] for key in data.files}


def scalar_eval(kind: Any, fanin: Any, bits: list[int], modules: dict[str, ModuleType]) -> list[int]:
    """One input vector through the netlist with Python ints: the slowest, plainest check."""
    c = modules["common"]
    ops = {
        c.BUF: lambda a, b: a,
        c.NOT: lambda a, b: 1 - a,
        c.AND: lambda a, b: a & b,
        c.OR: lambda a, b: a | b,
        c.NAND: lambda a, b: 1 - (a & b),
        c.NOR: lambda a, b: 1 - (a | b),
        c.XOR: lambda a, b: a ^ b,
    }
    values = list(bits) + [0] * (len(kind) - len(bits))
    for node in range(len(bits), len(kind)):
        a = values[fanin[node, 0]]
        values[node] = ops[int(kind[node])](a, values[fanin[node, 1]] if fanin[node, 1] >= 0 else a)
    return values


def test_netlist_is_topological_and_seeded(circuit: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    work, _ = circuit
    net = load(work / "netlist/netlist.npz")
    n_in = int(net["n_inputs"])
    assert len(net["kind"]) == n_in + SMALL_CIRCUIT["gates"] and n_in == SMALL_CIRCUIT["inputs"]
    assert (net["fanin"][:n_in] == -1).all() and (net["kind"][:n_in] == 0).all()
    ids = np.arange(len(net["kind"]))
    assert (net["fanin"][n_in:, 0] >= 0).all() and (net["fanin"][n_in:] < ids[n_in:, None]).all()
    script = str(EXAMPLES / "circuit/app/netlist.py")
    run(
        [
            sys.executable,
            script,
            "--seed",
            str(SMALL_CIRCUIT["seed"]),
            "--gates",
            "1500",
            "--inputs",
            "24",
            "--outputs",
            "12",
            "--out",
            str(tmp_path / "again.npz"),
        ]
    )
    assert np.array_equal(load(tmp_path / "again.npz")["fanin"], net["fanin"])


def test_synthesis_simplifies_without_changing_the_logic(
    circuit: tuple[Path, dict[str, str]], app_modules: dict[str, ModuleType]
) -> None:
    work, _ = circuit
    c = app_modules["common"]
    net, syn = load(work / "netlist/netlist.npz"), load(work / "synthesize/synth.npz")
    n_in = int(syn["n_inputs"])
    kind, fanin, level = syn["kind"], syn["fanin"], syn["level"]
    assert not (kind == c.BUF).any()
    gates = range(n_in, len(kind))
    assert all(not (kind[g] == c.NOT and kind[fanin[g, 0]] == c.NOT) for g in gates), "NOT(NOT x) left"
    keys = [(int(kind[g]), *sorted(fanin[g])) for g in gates]
    assert len(set(keys)) == len(keys), "structural hashing left duplicate gates"
    for g in gates:
        assert level[g] == 1 + max(level[f] for f in fanin[g] if f >= 0)
    report = json.loads((work / "synthesize/synth.json").read_text())
    assert report["gates_after"] == len(kind) - n_in < report["gates_before"] == SMALL_CIRCUIT["gates"]
    rng = np.random.default_rng(0)
    for _ in range(16):
        bits = [int(b) for b in rng.integers(0, 2, n_in)]
        original = scalar_eval(net["kind"], net["fanin"], bits, app_modules)
        simplified = scalar_eval(kind, fanin, bits, app_modules)
        assert [original[o] for o in net["outputs"]] == [simplified[o] for o in syn["outputs"]]


def test_placement_is_legal_and_its_report_adds_up(circuit: tuple[Path, dict[str, str]]) -> None:
    work, _ = circuit
    syn, placed = load(work / "synthesize/synth.npz"), load(work / "place/place.npz")
    n_in, (width, height) = int(syn["n_inputs"]), placed["die"]
    xy = placed["xy"]
    gates = xy[n_in:]
    assert len({tuple(p) for p in gates}) == len(gates), "two gates on one site"
    assert gates[:, 0].min() >= 1 and gates[:, 0].max() <= width - 2
    assert gates[:, 1].min() >= 0 and gates[:, 1].max() <= height - 1
    assert (xy[:n_in, 0] == 0).all() and (placed["pad_xy"][:, 0] == width - 1).all()
    report = json.loads((work / "place/place.json").read_text())
    fanin = syn["fanin"]
    length = sum(abs(xy[f] - xy[g]).sum() for g in range(len(fanin)) for f in fanin[g] if f >= 0)
    length += sum(abs(xy[o] - placed["pad_xy"][p]).sum() for p, o in enumerate(syn["outputs"]))
    assert report["wirelength_legal"] == length
    assert report["wirelength_global"] < report["wirelength_legal"], "spreading only lengthens wires"


def test_quadratic_placement_solves_its_linear_system(app_modules: dict[str, ModuleType]) -> None:
    place = app_modules["place"]
    rng = np.random.default_rng(5)
    n_in, n_nodes = 3, 12
    edges = np.array([(rng.integers(0, g), g) for g in range(n_in, n_nodes) for _ in range(2)] + [(n_nodes - 1, -1)])
    pads = rng.random((n_in + 1, 2)) * 10
    glob, _ = place.quadratic(np, edges, n_in, n_nodes, pads)
    laplacian = np.zeros((n_nodes - n_in, n_nodes - n_in))
    rhs = np.zeros((n_nodes - n_in, 2))
    for u, v in edges:
        ends = [(u, u >= n_in), (v, v >= n_in)]
        pos = [pads[u] if u < n_in else None, pads[n_in - 1 - v] if v < 0 else None]
        for (node, movable), (other, other_movable), fixed in ((ends[0], ends[1], pos[1]), (ends[1], ends[0], pos[0])):
            if movable:
                laplacian[node - n_in, node - n_in] += 1
                if other_movable:
                    laplacian[node - n_in, other - n_in] -= 1
                else:
                    rhs[node - n_in] += fixed
    np.testing.assert_allclose(glob, np.linalg.solve(laplacian, rhs), rtol=1e-6, atol=1e-6)


def test_routing_lengths_and_usage_maps_agree_with_the_placement(circuit: tuple[Path, dict[str, str]]) -> None:
    work, _ = circuit
    syn, placed, routed = (load(work / f) for f in ("synthesize/synth.npz", "place/place.npz", "route/route.npz"))
    xy, pads, fanin = placed["xy"], placed["pad_xy"], syn["fanin"]
    for g in range(len(fanin)):
        for slot in (0, 1):
            f = fanin[g, slot]
            expected = abs(xy[f] - xy[g]).sum() if f >= 0 else 0
            assert routed["fanin_wire"][g, slot] == expected
    assert list(routed["output_wire"]) == [abs(xy[o] - pads[p]).sum() for p, o in enumerate(syn["outputs"])]
    # Whatever L shape a connection takes, it crosses |dx|+1 gcells horizontally and |dy|+1 vertically.
    report = json.loads((work / "route/route.json").read_text())
    starts = [xy[f] for g in range(len(fanin)) for f in fanin[g] if f >= 0] + [xy[o] for o in syn["outputs"]]
    ends = [xy[g] for g in range(len(fanin)) for f in fanin[g] if f >= 0] + list(pads)
    gcell = 4  # route.py's default --gcell, which the workflow keeps
    dx = sum(abs(a[0] // gcell - b[0] // gcell) + 1 for a, b in zip(starts, ends, strict=True))
    dy = sum(abs(a[1] // gcell - b[1] // gcell) + 1 for a, b in zip(starts, ends, strict=True))
    assert routed["husage"].sum() == dx and routed["vusage"].sum() == dy
    capacity = int(routed["capacity"])
    over = np.maximum(routed["husage"] - capacity, 0).sum() + np.maximum(routed["vusage"] - capacity, 0).sum()
    assert report["overflow"] == over
    assert report["wirelength"] == routed["fanin_wire"].sum() + routed["output_wire"].sum()


def test_simulation_matches_a_plain_evaluation_and_timing_adds_up(
    circuit: tuple[Path, dict[str, str]], app_modules: dict[str, ModuleType]
) -> None:
    work, _ = circuit
    c = app_modules["common"]
    syn, routed, sim = (load(work / f) for f in ("synthesize/synth.npz", "route/route.npz", "simulate/sim.npz"))
    words = SMALL_CIRCUIT["vectors"] // 64
    assert sim["in_words"].shape == (SMALL_CIRCUIT["inputs"], words)
    reference = c.evaluate(syn["kind"], syn["fanin"], sim["in_words"])
    assert np.array_equal(sim["out_words"], reference[syn["outputs"]])
    ones = np.unpackbits(reference.view(np.uint8), axis=1).sum(axis=1) / SMALL_CIRCUIT["vectors"]
    np.testing.assert_allclose(sim["probability"], ones)
    assert ((sim["toggle"] >= 0) & (sim["toggle"] <= 1)).all()
    # Arrival times, recomputed node by node in id order (fanins first) with the same delay model.
    fanin, n_in = syn["fanin"], int(syn["n_inputs"])
    fanout = np.bincount(fanin[fanin >= 0], minlength=len(fanin)) + np.bincount(syn["outputs"], minlength=len(fanin))
    wire = routed["fanin_wire"]
    arrival = np.zeros(len(fanin))
    for g in range(n_in, len(fanin)):
        late = max(
            arrival[f] + c.WIRE_LINEAR * wire[g, s] + c.WIRE_QUADRATIC * wire[g, s] ** 2
            for s, f in enumerate(fanin[g])
            if f >= 0
        )
        arrival[g] = late + c.GATE_DELAY[syn["kind"][g]] + c.FANOUT_DELAY * fanout[g]
    np.testing.assert_allclose(sim["arrival"], arrival)
    timing = json.loads((work / "simulate/timing.json").read_text())
    assert timing["critical_ps"] == pytest.approx(sim["output_arrival"].max(), abs=0.01)
    path = sim["critical_path"]
    assert path[0] < n_in and all(path[i] in fanin[path[i + 1]] for i in range(len(path) - 1))


def test_popcount(app_modules: dict[str, ModuleType]) -> None:
    values = np.random.default_rng(1).integers(0, 2**64, size=200, dtype=np.uint64)
    values[:3] = [0, 2**64 - 1, 1 << 63]
    counts = app_modules["simulate"].popcount(np, values)
    assert [int(n) for n in counts] == [bin(int(v)).count("1") for v in values]


def test_signoff_passes_the_flow_and_collects_every_report(circuit: tuple[Path, dict[str, str]]) -> None:
    work, out = circuit
    report = json.loads((work / "signoff/report.json").read_text())
    assert report["equivalence"] == {"vectors_checked": 64 * 32, "mismatched_bits": 0}
    assert report["status"] == ("PASS" if report["routing"]["overflow"] == 0 else "FAIL")
    assert {"synthesis", "placement", "routing", "timing"} <= set(report)
    assert report["timing"]["worst_slack_ps"] > 0  # SMALL_CIRCUIT's clock is 1 us
    assert f"signoff: {report['status']}" in out["signoff"]


def _signoff(work: Path, sim_dir: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return run(
        [
            sys.executable,
            str(EXAMPLES / "circuit/app/signoff.py"),
            "--netlist",
            str(work / "netlist/netlist.npz"),
            "--synthesis",
            str(work / "synthesize/synth.json"),
            "--placement",
            str(work / "place/place.json"),
            "--routing",
            str(work / "route/route.json"),
            "--simulation",
            str(sim_dir / "sim.npz"),
            "--timing",
            str(sim_dir / "timing.json"),
            "--out",
            str(out),
        ],
        check=False,
    )


def _simulate(netlist: Path, work: Path, sim_dir: Path, clock: float) -> None:
    run(
        [
            sys.executable,
            str(EXAMPLES / "circuit/app/simulate.py"),
            "--netlist",
            str(netlist),
            "--routing",
            str(work / "route/route.npz"),
            "--vectors",
            "2048",
            "--seed",
            "3",
            "--clock",
            str(clock),
            "--out",
            str(sim_dir / "sim.npz"),
            "--report",
            str(sim_dir / "timing.json"),
        ]
    )


def test_signoff_catches_a_synthesis_that_changed_the_logic(
    circuit: tuple[Path, dict[str, str]], tmp_path: Path, app_modules: dict[str, ModuleType]
) -> None:
    work, _ = circuit
    c = app_modules["common"]
    syn = load(work / "synthesize/synth.npz")
    swap = {c.AND: c.OR, c.OR: c.AND, c.NAND: c.NOR, c.NOR: c.NAND, c.XOR: c.AND}
    victim = next(int(o) for o in syn["outputs"] if int(syn["kind"][o]) in swap)
    syn["kind"][victim] = swap[int(syn["kind"][victim])]
    np.savez(tmp_path / "broken.npz", **syn)
    _simulate(tmp_path / "broken.npz", work, tmp_path, clock=1e6)
    done = _signoff(work, tmp_path, tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert done.returncode == 1 and report["status"] == "FAIL"
    assert report["equivalence"]["mismatched_bits"] > 0
    assert "output bits differ from the original netlist" in report["problems"][0]


def test_signoff_reports_a_timing_violation_without_failing_the_step(
    circuit: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    work, _ = circuit
    _simulate(work / "synthesize/synth.npz", work, tmp_path, clock=100.0)
    done = _signoff(work, tmp_path, tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert done.returncode == 0 and report["status"] == "FAIL"
    assert any(p.startswith("timing: worst slack -") for p in report["problems"])


def test_litho_numpy_path_images_the_placement(circuit: tuple[Path, dict[str, str]]) -> None:
    work, _ = circuit
    placed = load(work / "place/place.npz")
    aerial = load(work / "litho/litho.npz")["aerial"]
    width, height = placed["die"]
    assert aerial.shape == (height * 8, width * 8) and aerial.min() >= 0
    report = json.loads((work / "litho/litho.json").read_text())
    assert 0 <= report["pattern_error"] < 1 and report["contrast"] > 0.1


def test_aerial_image_of_open_and_dark_masks_and_a_large_square(app_modules: dict[str, ModuleType]) -> None:
    litho = app_modules["litho"]
    np.testing.assert_allclose(litho.aerial_image(np, np.ones((64, 64), np.float32), 8), 1.0, atol=1e-5)
    assert np.abs(litho.aerial_image(np, np.zeros((64, 64), np.float32), 8)).max() < 1e-6
    mask = np.zeros((128, 128), np.float32)
    mask[32:96, 32:96] = 1  # 1.3 um square: far above the resolution limit
    image = litho.aerial_image(np, mask, 8)
    assert image[64, 64] == pytest.approx(1.0, abs=0.1) and image[5, 5] < 0.05
