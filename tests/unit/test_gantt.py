"""Gantt charts: the SVG's geometry read back with xml.etree, the HTML page, and file output."""

from __future__ import annotations

import dataclasses
import types
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hetflow.errors import UsageError
from hetflow.plan.instance import Instance, Placement, Plan
from hetflow.report import gantt
from hetflow.report.gantt import FIXED_COLORS, gantt_html, gantt_svg, time_ticks, variant_colors, write_gantt
from tests.unit.test_simulate_support import GIB, chain_and_fork, instance, list_schedule, mclass, opt, task

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def rects(root: ET.Element, cls: str) -> list[ET.Element]:
    return [r for r in root.iterfind(".//s:rect", NS) if r.get("class") == cls]


def lane_of(root: ET.Element, bar: ET.Element) -> str:
    y = float(bar.get("y", "0"))
    for lane in rects(root, "lane"):
        top = float(lane.get("y", "0"))
        if top <= y < top + float(lane.get("height", "0")):
            return lane.get("data-lane", "")
    raise AssertionError(f"bar at y={y} is in no lane")


def shared_machine() -> tuple[Instance, Plan]:
    """Two CPU steps at once on one machine, a 2-GPU step, and an idle machine."""
    inst = instance(
        [
            task("one", opt("cpu", "cpu", 10, cores=2)),
            task("two", opt("cpu", "cpu", 20, cores=2)),
            task("wide", opt("gpu", "gpu", 15, cores=1, gpus=2)),
            task("after", opt("cpu", "cpu", 5, cores=1)),
        ],
        [],
        [mclass("cpu", 2, cores=4), mclass("gpu", 1, cores=8, gpus=4, price=5)],
    )
    pl = {
        "one": Placement("one", "cpu", "cpu-0", "cpu", 0, 10, 2, GIB),
        "two": Placement("two", "cpu", "cpu-0", "cpu", 0, 20, 2, GIB),
        "wide": Placement("wide", "gpu", "gpu-0", "gpu", 5, 20, 1, GIB, (1, 3)),
        "after": Placement("after", "cpu", "cpu-0", "cpu", 10, 15, 1, GIB),
    }
    return inst, Plan(pl, 20.0, 0.12, "hand")


PLANS = [
    pytest.param(shared_machine, id="shared-machine"),
    pytest.param(lambda: (i := chain_and_fork(), list_schedule(i)), id="fork-join"),
]


@pytest.mark.parametrize("make", PLANS)
def test_one_bar_per_placement_at_its_time(make: object) -> None:
    inst, plan = make()  # type: ignore[operator]
    root = parse(gantt_svg(plan, inst))
    bars = rects(root, "bar")
    assert sorted(b.get("data-task", "") for b in bars) == sorted(plan.placements)
    axis = root.find(".//s:g[@class='axis']", NS)
    assert axis is not None
    origin, scale = float(axis.get("data-origin", "")), float(axis.get("data-px-per-s", ""))
    assert scale > 0
    for b in bars:
        p = plan.placements[b.get("data-task", "")]
        assert float(b.get("x", "")) == pytest.approx(origin + p.start * scale, abs=1e-3)
        assert float(b.get("width", "")) == pytest.approx((p.finish - p.start) * scale, abs=1e-3)
    # the time axis spans the makespan: its last tick is within one step of it
    ticks = [t.text for t in root.iterfind(".//s:text", NS) if t.get("class") == "tick"]
    assert ticks[0] in ("0s", "0m", "0.0s")


def test_lanes_gpu_lanes_and_rows() -> None:
    inst, plan = shared_machine()
    root = parse(gantt_svg(plan, inst))
    lanes = [r.get("data-lane") for r in rects(root, "lane")]
    # 2 CPU machines, then the GPU machine's own lane and one per GPU
    assert lanes == ["cpu-0", "cpu-1", "gpu-0", "gpu-0 / GPU 0", "gpu-0 / GPU 1", "gpu-0 / GPU 2", "gpu-0 / GPU 3"]
    where = {b.get("data-task"): lane_of(root, b) for b in rects(root, "bar")}
    assert where == {"one": "cpu-0", "two": "cpu-0", "after": "cpu-0", "wide": "gpu-0 / GPU 1"}
    # the 2-GPU step is drawn again in its second GPU's lane, marked as not the primary bar
    assert [lane_of(root, b) for b in rects(root, "bar-more")] == ["gpu-0 / GPU 3"]
    # one and two overlap in time, so they are in different rows; after reuses one's row
    ys = {b.get("data-task"): float(b.get("y", "")) for b in rects(root, "bar")}
    assert ys["one"] != ys["two"]
    assert ys["after"] == ys["one"]


@pytest.mark.parametrize("make", PLANS)
def test_legend_and_colors_by_variant(make: object) -> None:
    inst, plan = make()  # type: ignore[operator]
    root = parse(gantt_svg(plan, inst))
    entries = [g.get("data-variant", "") for g in root.iterfind(".//s:g", NS) if g.get("class") == "legend-entry"]
    variants = {p.variant for p in plan.placements.values()}
    assert sorted(entries) == sorted(variants)  # one entry per variant, none twice
    colors = variant_colors(list(variants))
    for b in rects(root, "bar"):
        assert b.get("fill") == colors[b.get("data-variant", "")]


def test_palette_is_stable_across_charts() -> None:
    assert variant_colors(["gpu", "cpu"]) == {"cpu": FIXED_COLORS["cpu"], "gpu": FIXED_COLORS["gpu"]}
    assert variant_colors(["cpu", "avx512", "gpu"])["cpu"] == variant_colors(["cpu"])["cpu"]
    many = variant_colors([f"v{i}" for i in range(5)])
    assert len(set(many.values())) == 5


def test_title_hover_and_labels() -> None:
    inst, plan = shared_machine()
    root = parse(gantt_svg(plan, inst, title="demo & co"))
    title = next(t for t in root.iterfind(".//s:text", NS) if t.get("class") == "title")
    assert title.text == "demo & co — makespan 20.0s, cost $0.12"
    hover = {b.get("data-task"): b.findtext("s:title", namespaces=NS) for b in rects(root, "bar")}
    assert hover["wide"] is not None and "wide (gpu) on gpu-0 / GPU 1,3" in hover["wide"]
    labels = {t.text for t in root.iterfind(".//s:text", NS) if t.get("class") == "label"}
    assert {"one", "two", "wide", "after"} <= labels


def test_a_name_that_does_not_fit_is_left_to_the_hover() -> None:
    inst, plan = shared_machine()
    long = "a-step-name-far-too-long-for-a-one-second-bar"
    pl = dict(plan.placements)
    pl["after"] = dataclasses.replace(pl["after"], task=long, start=10, finish=10.2)
    root = parse(gantt_svg(dataclasses.replace(plan, placements={**pl}), inst))
    labels = {t.text for t in root.iterfind(".//s:text", NS) if t.get("class") == "label"}
    assert long not in labels
    assert any(b.get("data-task") == long for b in rects(root, "bar"))


@pytest.mark.parametrize(
    "span, first_steps",
    [
        pytest.param(37, ["0s", "5s", "10s"], id="seconds"),
        pytest.param(1515, ["0m", "5m", "10m"], id="minutes"),
        pytest.param(5 * 3600 + 60, ["0h", "1h", "2h"], id="hours"),
        pytest.param(0.7, ["0.0s", "0.1s", "0.2s"], id="sub-second"),
    ],
)
def test_time_ticks(span: float, first_steps: list[str]) -> None:
    ticks = time_ticks(span)
    assert [label for _, label in ticks[:3]] == first_steps
    assert 2 <= len(ticks) <= 11
    assert ticks[-1][0] <= span + 1e-9


def test_a_run_on_a_machine_the_instance_lacks_gets_its_own_lane() -> None:
    inst, plan = shared_machine()
    extra = Placement("late", "cpu", "laptop", "cpu", 0, 3, 1, GIB)
    root = parse(gantt_svg(dataclasses.replace(plan, placements={**plan.placements, "late": extra}), inst))
    assert [r.get("data-lane") for r in rects(root, "lane")][-1] == "laptop"


def test_html_wraps_the_svg_with_hover_titles() -> None:
    inst, plan = shared_machine()
    page = gantt_html(dataclasses.replace(plan, notes=("planned with seed 0",)), inst, title="demo")
    assert page.startswith("<!DOCTYPE html>")
    assert "<svg" in page and "</svg>" in page
    assert page.count("<title>") == 1 + 1 + 5  # the page, the svg, one per bar (4 + the 2nd GPU of wide)
    assert "<li>planned with seed 0</li>" in page


# --- files ---------------------------------------------------------------------------------------


def test_write_svg_and_html(tmp_path: Path) -> None:
    inst, plan = shared_machine()
    write_gantt(plan, inst, tmp_path / "g.svg")
    write_gantt(plan, inst, tmp_path / "g.HTML")
    assert (tmp_path / "g.svg").read_text().startswith("<svg")
    assert (tmp_path / "g.HTML").read_text().startswith("<!DOCTYPE html>")


def test_png_without_a_renderer_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gantt, "_optional_module", lambda name: None)
    inst, plan = shared_machine()
    with pytest.raises(UsageError, match=r"\.svg or \.html.*pip install cairosvg"):
        write_gantt(plan, inst, tmp_path / "g.png")


def test_png_through_cairosvg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def svg2png(*, bytestring: bytes, write_to: str) -> None:
        seen["svg"] = bytestring
        Path(write_to).write_bytes(b"\x89PNG fake")

    fake = types.SimpleNamespace(svg2png=svg2png)
    monkeypatch.setattr(gantt, "_optional_module", lambda name: fake if name == "cairosvg" else None)
    inst, plan = shared_machine()
    write_gantt(plan, inst, tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes().startswith(b"\x89PNG")
    assert isinstance(seen["svg"], bytes) and seen["svg"].startswith(b"<svg")


def test_png_with_whatever_is_installed(tmp_path: Path) -> None:
    # matplotlib is in the test extra, so a real renderer is always there to draw with
    assert gantt._optional_module("cairosvg") is not None or gantt._optional_module("matplotlib") is not None
    inst, plan = shared_machine()
    write_gantt(plan, inst, tmp_path / "g.png")
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_suffix(tmp_path: Path) -> None:
    inst, plan = shared_machine()
    with pytest.raises(UsageError, match=r"use a \.svg, \.html or \.png"):
        write_gantt(plan, inst, tmp_path / "g.pdf")
