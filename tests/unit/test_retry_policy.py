"""A step's ``retry:`` policy: what the file may say (and the messages when it is wrong), what
a failure changes for the next attempt, and the cluster runner moving a step off a node
class that failed under it.  ``--variant``/``--prefer`` parsing and steering are here too."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from hetflow.errors import SpecError, UsageError
from hetflow.execute.run.retries import Failure, NextAttempt, adjusted, after_failure, out_of_memory
from hetflow.plan import Steer, parse_steer, steer_workflow
from hetflow.plan.instance import MachineClass, Placement
from hetflow.spec import Retry
from tests.unit.builders import MIB, Outcome, load_steps, world
from tests.unit.test_runner_cluster import NodeFailing, QueueBackend, cluster_runner

TWO = """
train:
  variants:
    gpu: {image: x, resources: {gpus: 1, memory: 1Gi}}
    cpu: {image: x, resources: {cpus: 2, memory: 2Gi}}
  RETRY
"""


def _policy(retry: str) -> Retry:
    return load_steps(TWO.replace("RETRY", retry)).workflow.steps["train"].retry_policy


@pytest.mark.parametrize(
    ("retry", "expect"),
    [
        ("retries: 3", Retry(count=3)),
        ("retry: {count: 2}", Retry(count=2)),
        ("retry: {count: 1, memory: x2}", Retry(count=1, memory=2.0)),
        ("retry: {count: 1, memory: 1.5x, cpus: 4}", Retry(count=1, memory=1.5, cpus=4.0)),
        ("retry: {count: 1, fallback: [cpu]}", Retry(count=1, fallback=("cpu",))),
        ("retry: {count: 1, avoid_failed_node: true}", Retry(count=1, avoid_failed_node=True)),
    ],
    ids=["retries-shorthand", "count", "memory-x2", "memory-1.5x-cpus-4", "fallback", "avoid-failed-node"],
)
def test_good_retry_policies(retry: str, expect: Retry) -> None:
    assert _policy(retry) == expect


@pytest.mark.parametrize(
    ("retry", "initial", "factor", "cap", "delays"),
    [
        ("retry: {count: 3}", None, None, None, [2.0, 4.0, 8.0]),
        ("retry: {count: 3, backoff: 10s}", 10.0, None, None, [10.0, 20.0, 40.0]),
        ("retry: {count: 3, backoff: {initial: 1s, factor: 3, max: 5s}}", 1.0, 3.0, 5.0, [1.0, 3.0, 5.0]),
        ("retry: {count: 3, backoff: {initial: 4s, factor: 1}}", 4.0, 1.0, None, [4.0, 4.0, 4.0]),
    ],
    ids=["default", "duration", "mapping-capped", "constant"],
)
def test_backoff(
    retry: str, initial: float | None, factor: float | None, cap: float | None, delays: list[float]
) -> None:
    policy = _policy(retry)
    b = policy.backoff
    if initial is None:
        assert b is None
        return
    assert b is not None and (b.initial, b.factor, b.max) == (initial, factor, cap)
    assert [b.delay(k, 2.0, 300.0) for k in (1, 2, 3)] == delays


@pytest.mark.parametrize(
    ("retry", "message"),
    [
        ("retries: 1\n  retry: {count: 2}", "wf.yaml:4: error: steps.train: set either 'retries' or 'retry', not both"),
        ("retry: {count: 101}", "steps.train.retry.count: Input should be less than or equal to 100"),
        ("retry: {count: -1}", "steps.train.retry.count: Input should be greater than or equal to 0"),
        ("retry: {memory: y2}", "steps.train.retry.memory: 'y2' is not a multiplier; write a multiplier as x2"),
        ("retry: {memory: x1}", "multiplier 'x1' is out of range"),
        ("retry: {cpus: x100}", "multiplier 'x100' is out of range"),
        ("retry: {backoff: soon}", "'soon' is not a duration"),
        ("retry: {backoff: 2d}", "a backoff wait must be at most a day"),
        ("retry: {backoff: {initial: 1m, max: 10s}}", "backoff max (10s) is below its initial wait (60s)"),
        ("retry: {fallback: [tpu]}", "retry fallback names variant 'tpu', which this step does not have"),
        ("retry: {fallback: [cpu, cpu]}", "retry fallback names variant 'cpu' twice"),
        ("retry: {count: 1, again: true}", "unknown key 'again' in steps.train.retry; allowed keys: count, backoff"),
    ],
    ids=[
        "both-forms",
        "count-too-high",
        "count-negative",
        "memory-not-a-multiplier",
        "memory-not-growing",
        "cpus-too-big",
        "backoff-not-a-duration",
        "backoff-too-long",
        "backoff-max-below-initial",
        "fallback-unknown-variant",
        "fallback-twice",
        "unknown-key",
    ],
)
def test_bad_retry_policies_say_where_and_what(retry: str, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        load_steps(TWO.replace("RETRY", retry))
    assert message in str(exc.value)
    assert "wf.yaml:" in str(exc.value)


def test_a_template_gives_its_retry_policy_to_the_steps_using_it() -> None:
    text = (
        "apiVersion: hetflow/v1\nname: wf\ntemplates:\n  big: {retry: {count: 2, memory: x2}}\n"
        "steps:\n  a: {use: big, image: x}\n  b: {use: big, image: x, retry: {count: 1, memory: x2, cpus: x2}}\n"
    )
    from hetflow.spec.load.loader import parse_workflow

    steps = parse_workflow(text, "wf.yaml").workflow.steps
    assert steps["a"].retry_policy == Retry(count=2, memory=2.0)
    assert steps["b"].retry_policy == Retry(count=1, memory=2.0, cpus=2.0)


def _fail(variant: str = "cpu", exit_code: int | None = 137, **kw: object) -> Failure:
    base: dict[str, object] = {"node": "vm", "cpus": 2.0, "memory": 512 * MIB, "peak_memory": 512 * MIB}
    base.update(kw)
    return Failure(variant, exit_code=exit_code, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("failure", "oom"),
    [
        (_fail(), True),
        (_fail(peak_memory=100 * MIB), False),
        (_fail(peak_memory=None, oom_killed=True), True),
        (_fail(peak_memory=None), False),
        (_fail(exit_code=1), False),
    ],
    ids=["137-peak-at-limit", "137-peak-far-below", "137-engine-says-oom", "137-no-evidence", "exit-1"],
)
def test_out_of_memory_needs_exit_137_and_evidence(failure: Failure, oom: bool) -> None:
    assert out_of_memory(failure) is oom


@pytest.mark.parametrize(
    ("policy", "failure", "limits", "changes", "memory"),
    [
        (Retry(count=1, memory=4), _fail(), (4.0, 8 << 30), ["memory 512Mi -> 2Gi after an out-of-memory kill"], 2048),
        (
            Retry(count=1, memory=4),
            _fail(),
            (4.0, 1 << 30),
            ["memory 512Mi -> 1Gi after an out-of-memory kill (exit 137), capped at what vm has (x4 would be 2Gi)"],
            1024,
        ),
        (Retry(count=1, memory=4), _fail(exit_code=1), (4.0, 8 << 30), [], None),
        (
            Retry(count=1, cpus=2),
            _fail(exit_code=1),
            (3.0, 8 << 30),
            ["cpus 2 -> 3 on retry, capped at the 3 vm has"],
            None,
        ),
        (Retry(count=1, fallback=("cpu",)), _fail("gpu", exit_code=3), None, ["variant gpu -> cpu after exit 3"], None),
        (Retry(count=1, fallback=("cpu",)), _fail("cpu", exit_code=3), None, [], None),
        (
            Retry(count=1, avoid_failed_node=True),
            _fail(exit_code=1),
            None,
            ["avoid_failed_node: vm is the only node here, so the retry runs on it again"],
            None,
        ),
    ],
    ids=["oom-x4", "oom-capped", "not-oom", "cpus-capped", "fallback", "fallback-at-end", "avoid-locally"],
)
def test_what_a_failure_changes_for_the_next_attempt(
    policy: Retry, failure: Failure, limits: tuple[float, int] | None, changes: list[str], memory: int | None
) -> None:
    step = load_steps(TWO.replace("RETRY", "")).workflow.steps["train"]
    nxt = after_failure(step, policy, failure, None, limits, cluster=False)
    assert all(any(c.startswith(want) for c in nxt.changes) for want in changes) and len(nxt.changes) == len(changes)
    if memory is not None:
        assert nxt.memory[failure.variant] == memory * MIB
        assert adjusted(step, nxt).resolved_variants()[failure.variant].resources.memory == memory * MIB
    if policy.fallback and nxt.variant is not None:
        assert list(adjusted(step, nxt).resolved_variants()) == [nxt.variant]


def test_avoid_failed_node_on_a_cluster_names_the_class() -> None:
    step = load_steps(TWO.replace("RETRY", "")).workflow.steps["train"]
    f = Failure("cpu", "spot-a", None, 2.0, 512 * MIB, node_fault=True)
    nxt = after_failure(step, Retry(avoid_failed_node=True), f, NextAttempt(), None, cluster=True)
    assert nxt.avoid == {"spot-a"} and nxt.changes == ("class spot-a avoided after its node failed",)


SPOT = (
    MachineClass("spot-a", 4, 16, 64 << 30, spot=True),
    MachineClass("spot-b", 4, 16, 64 << 30, spot=True),
    MachineClass("ondemand", 2, 16, 64 << 30),
)


@pytest.mark.parametrize(
    ("retry", "second"),
    [("retry: {avoid_failed_node: true}", "ondemand"), ("retries: 0", "spot-a")],
    ids=["avoids-the-failed-spot-class", "without-the-policy-same-class"],
)
def test_a_step_whose_spot_node_died_retries_on_demand(tmp_path: Path, retry: str, second: str) -> None:
    body = f"a:\n  image: x\n  outputs: [o]\n  {retry}\n"
    w = world(tmp_path, body, outcomes={"a": [Outcome(files={"o": b"1"}), Outcome(files={"o": b"2"})]})
    backend = NodeFailing(w.engine, lost=1)
    placed = {"a": Placement("a", "default", "spot-a-0", "spot-a", 0.0, 1.0, 1.0, 0)}
    assert cluster_runner(w, backend, placed, SPOT).execute() == "succeeded"
    attempts = w.store.attempts(w.run.id, "a")
    assert [a.node for a in attempts] == ["spot-a", second]
    assert [backend.jobs[a.container].node_class for a in attempts] == ["spot-a", second]
    if second == "ondemand":
        said = [e.message for e in w.store.events(w.run.id) if e.step == "a"]
        assert any("next attempt: class spot-a avoided after its node failed" in m for m in said)
        assert any(
            m.startswith("attempt 2: ") and "default on ondemand (moved by its retry policy, avoiding spot-a)" in m
            for m in said
        )


def test_a_gpu_variant_failing_on_a_cluster_falls_back_to_the_cpu_variant_on_a_cpu_class(tmp_path: Path) -> None:
    body = """
a:
  variants:
    gpu: {image: x, resources: {gpus: 1}}
    cpu: {image: x}
  outputs: [o]
  retry: {count: 1, fallback: [cpu]}
"""
    w = world(tmp_path, body, outcomes={"a": [Outcome(exit_code=3), Outcome(files={"o": b"cpu"})]})
    backend = QueueBackend(w.engine)
    placed = {"a": Placement("a", "gpu", "gpu.t4-0", "gpu.t4", 0.0, 1.0, 1.0, 0, gpus=(0,))}
    assert cluster_runner(w, backend, placed).execute() == "succeeded"
    attempts = w.store.attempts(w.run.id, "a")
    assert [(a.variant, a.node, a.exit_code) for a in attempts] == [("gpu", "gpu.t4", 3), ("cpu", "cpu.std", 0)]
    assert [backend.jobs[a.container].gpus for a in attempts] == [1, 0]
    assert attempts[1].message == "retry: variant gpu -> cpu after exit 3"


@pytest.mark.parametrize(
    ("variant", "prefer", "message"),
    [
        (["train"], None, "--variant 'train': write STEP=VARIANT"),
        (["train=gpu", "train=cpu"], None, "--variant names step 'train' twice"),
        ([], "fpga", "--prefer 'fpga': use gpu or cpu"),
        (["trian=cpu"], None, "has no step 'trian' (did you mean 'train'?); its steps: train"),
        (["train=tpu"], None, "step 'train' has no variant 'tpu' (did you mean 'gpu'?); its variants: gpu, cpu"),
        (["train=gpu"], None, "variant 'gpu' of step 'train' can never run here"),
    ],
    ids=["no-equals", "twice", "bad-prefer", "unknown-step", "unknown-variant", "cannot-run"],
)
def test_bad_steering_is_a_usage_error_naming_the_choices(variant: list[str], prefer: str | None, message: str) -> None:
    wf = load_steps(TWO.replace("RETRY", "")).workflow
    with pytest.raises(UsageError) as exc:
        steer_workflow(wf, parse_steer(variant, prefer), lambda s, v: not v.uses_gpu)
    assert message in str(exc.value) and exc.value.exit_code == 2


@pytest.mark.parametrize(
    ("steer", "gpu_runs", "kept", "reason"),
    [
        (Steer({"train": "cpu"}), True, ["cpu"], "forced by --variant train=cpu"),
        (Steer(prefer="cpu"), True, ["cpu"], "preferred by --prefer cpu"),
        (Steer(prefer="gpu"), True, ["gpu"], "preferred by --prefer gpu"),
        (Steer(prefer="gpu"), False, ["gpu", "cpu"], None),
        (Steer(), True, ["gpu", "cpu"], None),
    ],
    ids=["forced", "prefer-cpu", "prefer-gpu", "prefer-gpu-where-none-runs", "nothing"],
)
def test_steering_keeps_the_chosen_variants_and_says_why(
    steer: Steer, gpu_runs: bool, kept: list[str], reason: str | None
) -> None:
    wf = load_steps(TWO.replace("RETRY", "")).workflow
    steered, why = steer_workflow(wf, steer, lambda s, v: gpu_runs or not v.uses_gpu)
    assert list(steered.steps["train"].resolved_variants()) == kept
    assert why.get("train") == reason


@pytest.mark.parametrize(
    ("text", "kills"),
    [
        ("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", 2),  # v1 memory.oom_control
        ("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n", 1),  # v2 memory.events
        ("oom_kill_disable 0\nunder_oom 0\n", None),  # a kernel before 4.13 has no count
    ],
    ids=["v1-oom-control", "v2-memory-events", "no-count"],
)
def test_the_cgroups_oom_kill_count_is_read(text: str, kills: int | None) -> None:
    from hetflow.execute.backends.local.cgroups import parse_oom_kills

    assert parse_oom_kills(text) == kills


def test_a_forced_fan_out_step_forces_every_item() -> None:
    wf = load_steps(
        """
        train:
          foreach: [1, 2]
          variants:
            gpu: {image: x, resources: {gpus: 1}}
            cpu: {image: x}
        """
    ).workflow
    steered, why = steer_workflow(wf, Steer({"train": "cpu"}), lambda s, v: True)
    kept = {n: list(s.resolved_variants()) for n, s in steered.steps.items()}
    assert kept == {"train.0": ["cpu"], "train.1": ["cpu"]}
    assert set(why.values()) == {"forced by --variant train=cpu"}


PINNED = (MachineClass("n1", 1, 16, 64 << 30), MachineClass("n2", 1, 16, 64 << 30))


@pytest.mark.parametrize(
    ("n2_memory", "second", "said"),
    [
        (64 << 30, "n2", "default on n2 (moved: node n1 failed under it)"),
        (1 << 30, "n1", "node n1 failed under it and no other node class can run variant(s) default"),
    ],
    ids=["moves-to-a-node-that-fits", "none-fits-says-why"],
)
def test_a_retry_after_its_pinned_node_died_is_not_pinned_there_again(
    tmp_path: Path, n2_memory: int, second: str, said: str
) -> None:
    # no retry policy: a node fault alone moves the retry off the node that died
    body = "a:\n  image: x\n  outputs: [o]\n  resources: {memory: 4Gi}\n"
    w = world(tmp_path, body, outcomes={"a": [Outcome(files={"o": b"1"}), Outcome(files={"o": b"2"})]})
    backend = NodeFailing(w.engine, lost=1)  # its job ends NODE_FAIL on n1
    placed = {"a": Placement("a", "default", "n1-0", "n1", 0.0, 1.0, 1.0, 0)}
    classes = (PINNED[0], replace(PINNED[1], memory=n2_memory))
    assert cluster_runner(w, backend, placed, classes).execute() == "succeeded"
    attempts = w.store.attempts(w.run.id, "a")
    assert [backend.jobs[a.container].node for a in attempts] == ["n1", second]  # Slurm --nodelist
    events = [e.message for e in w.store.events(w.run.id) if e.step == "a"]
    assert any(m.startswith("attempt 2: ") and said in m for m in events), events
