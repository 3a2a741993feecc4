"""A run's record as people read it: the trace (TSV, JSON), the HTML report, and the
right-sizing suggestions learned from recorded use."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from hetflow.errors import UsageError
from hetflow.plan import Placement, Plan, UsageSample, suggest_sizes
from hetflow.report import (
    DEFAULT_TRACE_FIELDS,
    actual_schedule,
    cached_steps,
    check_trace_fields,
    run_report_html,
    trace_json,
    trace_rows,
    trace_tsv,
)
from hetflow.report.runreport import timeline
from hetflow.report.trace import cell
from hetflow.state import AttemptRecord, RunRecord, StepRecord

MI, GI = 1 << 20, 1 << 30
T0 = 1_795_571_680.0


def attempt(step: str, n: int = 1, **kw: object) -> AttemptRecord:
    base: dict[str, object] = {
        "run_id": "r1",
        "step": step,
        "attempt": n,
        "variant": "default",
        "node": "vm",
        "gpus": (),
        "gpu_uuids": (),
        "container": f"hf-r1-{step}-{n}",
        "image": "localhost/img:1",
        "state": "succeeded",
        "exit_code": 0,
        "started": T0,
        "ended": T0 + 3,
        "message": "",
    }
    return AttemptRecord(**{**base, **kw})  # type: ignore[arg-type]


def run_record(**kw: object) -> RunRecord:
    base: dict[str, object] = {
        "id": "r1",
        "name": "wf",
        "workflow_file": "/w/wf.yaml",
        "state": "succeeded",
        "created": T0 - 1,
        "started": T0,
        "ended": T0 + 10,
        "pid": None,
        "uid": 0,
        "gid": 0,
        "workdir": "/w",
        "spec_json": "{}",
        "params_json": "{}",
        "message": "all steps succeeded",
    }
    return RunRecord(**{**base, **kw})  # type: ignore[arg-type]


def step_record(step: str, state: str = "succeeded") -> StepRecord:
    return StepRecord("r1", step, state, "default", "vm", (), 1, 0, T0, T0 + 3, "", None)


MEASURED = attempt(
    "hog",
    cpus=2.0,
    memory=GI,
    peak_memory=64 * MI,
    cpu_seconds=1.5,
    image_id="sha256:01d8",
    run_started=T0 + 0.5,
    run_ended=T0 + 2.5,
    started=T0 + 0.2,
    ended=T0 + 2.7,
)
UNMEASURED = attempt("slurmy", started=T0, ended=T0 + 1, cpus=1.0, memory=512 * MI)


# --- trace ---------------------------------------------------------------------------------


def test_trace_rows_hold_raw_values_and_derive_realtime_and_cpu_share() -> None:
    (row,) = trace_rows([MEASURED])
    assert row["realtime"] == pytest.approx(2.0)
    assert row["duration"] == pytest.approx(2.3)  # submit to the container's exit
    assert row["%cpu"] == pytest.approx(75.0)  # 1.5 s of CPU in 2 s
    assert (row["peak_rss"], row["cpu_time"], row["memory"], row["image_id"]) == (64 * MI, 1.5, GI, "sha256:01d8")


def test_a_step_taken_from_the_cache_is_a_cached_row_with_attempt_0() -> None:
    ran = attempt("a")
    hit = StepRecord("r1", "b", "succeeded", "default", None, (), 0, 0, T0 + 1, T0 + 1, "cached: from run r0", None)
    never = StepRecord("r1", "c", "succeeded", "default", "vm", (), 1, 0, T0, T0 + 3, "", None)
    rows = trace_rows([ran], cached_steps([hit, never]))
    assert [(r["task_id"], r["step"], r["attempt"], r["status"]) for r in rows] == [
        (1, "a", 1, "succeeded"),
        (2, "b", 0, "cached"),
    ]
    assert rows[1]["peak_rss"] is None and "cached" in trace_tsv(rows)


def test_unknown_usage_is_null_in_json_and_a_dash_in_tsv() -> None:
    (row,) = trace_json(trace_rows([UNMEASURED]))
    assert (row["peak_rss"], row["cpu_time"], row["%cpu"], row["realtime"]) == (None, None, None, None)
    header, line = trace_tsv(trace_rows([UNMEASURED])).splitlines()
    values = dict(zip(header.split("\t"), line.split("\t"), strict=True))
    assert (values["peak_rss"], values["cpu_time"], values["%cpu"]) == ("-", "-", "-")
    assert values["memory"] == "512.0 MiB"


def test_tsv_has_a_header_and_one_row_per_attempt_in_submit_order() -> None:
    later = attempt("b", started=T0 + 5, ended=T0 + 6)
    text = trace_tsv(trace_rows([later, MEASURED, UNMEASURED]))
    lines = text.splitlines()
    assert lines[0].split("\t") == list(DEFAULT_TRACE_FIELDS)
    assert [ln.split("\t")[1] for ln in lines[1:]] == ["slurmy", "hog", "b"]
    assert [ln.split("\t")[0] for ln in lines[1:]] == ["1", "2", "3"]


def test_a_message_with_tabs_cannot_break_the_columns() -> None:
    odd = attempt("a", image="img\twith\ttabs\nand newline")
    _, line = trace_tsv(trace_rows([odd]), ("step", "image")).splitlines()
    assert line.split("\t") == ["a", "img with tabs and newline"]


@pytest.mark.parametrize(
    ("given", "want"),
    [
        ([], DEFAULT_TRACE_FIELDS),
        (["step,peak_rss"], ("step", "peak_rss")),
        (["step", "cpu_time", " %cpu "], ("step", "cpu_time", "%cpu")),
    ],
    ids=["default", "comma", "repeated"],
)
def test_fields_are_chosen_with_commas_or_repeats(given: list[str], want: tuple[str, ...]) -> None:
    assert check_trace_fields(given) == want


def test_an_unknown_field_says_which_exist() -> None:
    with pytest.raises(UsageError, match=r"unknown field\(s\) rss; choose from task_id, step"):
        check_trace_fields(["step,rss"])


# --- the HTML report -------------------------------------------------------------------------


class Page(HTMLParser):
    """What the tests look at: text, tags with their attributes, and every URL-ish attribute."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.text: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def rows_with(self, attr: str) -> dict[str, dict[str, str | None]]:
        return {a[attr] or "": a for t, a in self.tags if t == "tr" and attr in a}

    def flagged(self) -> list[str]:
        return [a.get("data-flag") or "" for t, a in self.tags if t == "td" and "data-flag" in a]


OVER = attempt(
    "greedy", cpus=8.0, memory=4 * GI, peak_memory=300 * MI, cpu_seconds=1.0, run_started=T0, run_ended=T0 + 2
)
FAIR = attempt(
    "fair", cpus=1.0, memory=512 * MI, peak_memory=400 * MI, cpu_seconds=1.8, run_started=T0, run_ended=T0 + 2
)
PLANNED = Plan(
    placements={
        "greedy": Placement("greedy", "default", "vm-0", "vm", 0.0, 4.0, 8.0, 4 * GI),
        "fair": Placement("fair", "default", "vm-0", "vm", 4.0, 6.0, 1.0, 512 * MI),
    },
    makespan=6.0,
    cost=0.25,
    algorithm="heuristic",
)


def report(attempts: list[AttemptRecord], planned: Plan | None = PLANNED, **run: object) -> str:
    steps = [step_record(s) for s in dict.fromkeys(a.step for a in attempts)]
    return run_report_html(run_record(**run), steps, attempts, planned)


def test_the_report_names_every_step_and_flags_only_the_over_asking_one() -> None:
    page = Page(report([OVER, FAIR]))
    rows = page.rows_with("data-step")
    assert set(rows) == {"greedy", "fair"}
    text = "".join(page.text)
    assert "asks ≥4x the memory it used" in text and "asks ≥4x the CPUs it used" in text
    assert page.flagged() == ["over-ask"]  # greedy only
    # the flag is in greedy's row: the <td data-flag> follows <tr data-step="greedy">
    order = [a.get("data-step") or a.get("data-flag") for t, a in page.tags if "data-step" in a or "data-flag" in a]
    assert order.index("over-ask") == order.index("greedy") + 1


def test_the_report_draws_planned_and_actual_on_one_axis() -> None:
    page = Page(report([OVER, FAIR]))
    lanes = [a.get("data-lane") for t, a in page.tags if t == "rect" and "data-lane" in a]
    assert lanes == ["plan: vm-0", "run: vm"]
    tasks = {a.get("data-task") for t, a in page.tags if t == "rect" and a.get("class") == "bar"}
    assert tasks == {"greedy (plan)", "fair (plan)", "greedy", "fair"}
    assert len([t for t, _ in page.tags if t == "svg"]) == 1


def test_without_a_stored_plan_only_what_ran_is_drawn_and_cost_is_unknown() -> None:
    page = Page(report([FAIR], planned=None))
    lanes = [a.get("data-lane") for t, a in page.tags if t == "rect" and "data-lane" in a]
    assert lanes == ["run: vm"]
    assert "unknown (the run has no stored plan)" in "".join(page.text)


def test_the_summary_counts_cpu_hours_over_the_measured_attempts_only() -> None:
    text = "".join(Page(report([OVER, FAIR, UNMEASURED])).text)
    assert f"{(1.0 + 1.8) / 3600:.4f} (measured for 2 of 3 attempts)" in text
    assert "planned cost$0.2500" in text


def test_the_report_is_self_contained() -> None:
    html = report([OVER, FAIR, UNMEASURED])
    assert not re.search(r"https?://", html)
    page = Page(html)
    fetching = [(t, a) for t, a in page.tags if t in ("script", "link", "img", "iframe", "object", "embed")]
    assert fetching == []
    assert not [a for _, a in page.tags if any(k in ("src", "href") for k in a)]
    assert "@import" not in html and "url(" not in html


def test_every_user_string_is_escaped() -> None:
    evil = "<script>alert(1)</script>"
    html = report([attempt("a", image=evil, message=evil)], name=evil, message=evil, workflow_file=evil)
    assert "<script>" not in html
    assert "&lt;script&gt;" in html
    assert [t for t, _ in Page(html).tags if t == "script"] == []


# --- right-sizing ----------------------------------------------------------------------------


def sample(step: str = "align", **kw: object) -> UsageSample:
    base: dict[str, object] = {
        "workflow": "wf",
        "step": step,
        "variant": "default",
        "cpus": 1.0,
        "memory": 4 * GI,
        "peak_memory": 300 * MI,
        "cpu_seconds": 9.0,
        "seconds": 10.0,
    }
    return UsageSample(**{**base, **kw})  # type: ignore[arg-type]


def test_a_step_asking_far_more_memory_than_it_used_gets_a_suggestion() -> None:
    (s,) = suggest_sizes([sample(peak_memory=300 * MI), sample(peak_memory=250 * MI), sample(peak_memory=280 * MI)])
    assert s.message == (
        "step 'align' (default) asks memory: 4Gi, used at most 300Mi in the last 3 runs: consider memory: 512Mi"
    )


@pytest.mark.parametrize(
    "samples",
    [
        [sample(memory=GI, peak_memory=300 * MI)],  # 3.4x: within reason
        [sample(peak_memory=None)],  # unknown use says nothing
        [sample(memory=None)],  # an attempt recorded before requests were
        [],
    ],
    ids=["under-4x", "unmeasured", "no-request", "no-history"],
)
def test_no_memory_suggestion_without_evidence(samples: list[UsageSample]) -> None:
    assert [s for s in suggest_sizes(samples) if s.resource == "memory"] == []


def test_the_most_recent_request_and_the_highest_use_count() -> None:
    # newest first: the request was lowered to 1Gi since; one run peaked at 900Mi
    got = suggest_sizes([sample(memory=GI, peak_memory=100 * MI), sample(memory=8 * GI, peak_memory=900 * MI)])
    assert [s for s in got if s.resource == "memory"] == []


def test_cpus_asked_but_idle_get_a_suggestion() -> None:
    got = suggest_sizes([sample(cpus=8.0, memory=GI, cpu_seconds=10.0, seconds=10.0)])  # one core busy
    assert [(s.resource, s.asked, s.used, s.suggest) for s in got] == [("cpus", "8", "1.00", "1.5")]


@pytest.mark.parametrize(
    ("realtime", "cpu", "want"),
    [(2.0, 1.0, "50.0%"), (1.0, 1.5, "150.0%"), (0.001, 0.057, "-")],
    ids=["half-a-core", "at-the-threshold", "a-millisecond-step"],
)
def test_cpu_percent_is_unknown_for_a_step_too_short_to_measure(realtime: float, cpu: float, want: str) -> None:
    # the cgroup's CPU time holds the runtime's own start-up: a step of a millisecond showed 5702%
    a = attempt("a", run_started=T0, run_ended=T0 + realtime, cpu_seconds=cpu)
    (row,) = trace_rows([a])
    assert cell("%cpu", row["%cpu"]) == want


def test_gpu_use_is_shown_in_percent_and_bytes() -> None:
    a = attempt("a", gpu_util_mean=62.5, gpu_util_max=99.0, gpu_memory_peak=2 * GI)
    (row,) = trace_rows([a])
    assert [cell(f, row[f]) for f in ("gpu_util", "gpu_util_max", "gpu_mem_peak")] == ["62.5%", "99.0%", "2.0 GiB"]


@pytest.mark.parametrize(
    ("run_started", "start"),
    [(None, 0.0), (T0 + 2, 2.0)],
    ids=["local-launch-is-its-start", "queued-by-a-cluster-engine"],
)
def test_the_actual_schedule_draws_an_attempt_from_when_it_ran(run_started: float | None, start: float) -> None:
    """A cluster engine's job was handed over (``started``) before it ran (``run_started``):
    the run's lane shows it from its run, not its wait in the queue."""
    plan, _ = actual_schedule(run_record(), [attempt("a", run_started=run_started, ended=T0 + 3)])
    assert (plan.placements["a"].start, plan.placements["a"].finish) == (start, 3.0)


# --- the timeline when the plan's lengths were guesses (issue 42) -------------------------------

DEFAULTS = Plan(
    placements={
        "greedy": Placement("greedy", "default", "vm-0", "vm", 0.0, 60.0, 8.0, 4 * GI),
        "fair": Placement("fair", "default", "vm-0", "vm", 60.0, 120.0, 1.0, 512 * MI),
    },
    makespan=120.0,
    cost=0.0,
    algorithm="heuristic",
)


@pytest.mark.parametrize(
    ("estimate", "fair_ends"),
    [("null", 3.0), ("60", 120.0)],
    ids=["no-estimates-scaled-to-the-run", "estimates-drawn-as-planned"],
)
def test_a_plan_of_default_estimates_is_drawn_at_the_runs_length(estimate: str, fair_ends: float) -> None:
    """60 s default bars set a 128 s axis for a 7.6 s run, its bars a sliver at the left."""
    spec = f'{{"steps": {{"greedy": {{"estimate": {estimate}}}, "fair": {{"estimate": {estimate}}}}}}}'
    run = run_record(spec_json=spec)
    chart = timeline(run, [OVER, FAIR], DEFAULTS)
    assert chart.placements["fair (plan)"].finish == pytest.approx(fair_ends)  # the run's bars end at 3 s
    text = "".join(Page(run_report_html(run, [], [OVER, FAIR], DEFAULTS)).text)
    assert ("drawn scaled to the run's length" in text) == (estimate == "null")


def test_a_run_bar_says_what_its_attempt_asked_and_used() -> None:
    """They said "0 cores, 0 B"."""
    short = {"cpu_seconds": 2.3, "peak_memory": 4 * MI, "run_started": T0, "run_ended": T0 + 0.1}
    brief = attempt("brief", cpus=1.0, memory=GI, **short)
    page = report([OVER, attempt("quiet", cpus=2.0, memory=GI), brief])
    titles = "".join(page.split("<title>")[i].split("</title>")[0] for i in range(1, page.count("<title>") + 1))
    assert "asked 8 cores, 4.0 GiB; used 0.50 cores, peak 300.0 MiB" in titles
    assert "asked 2 cores, 1.0 GiB; used not measured" in titles
    assert "asked 1 cores, 1.0 GiB; used peak 4.0 MiB" in titles  # 0.1 s: its CPU time is podman's start-up
    assert "0 cores, 0 B" not in titles
