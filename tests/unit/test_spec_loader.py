"""Workflow loading: valid files become models; every bad file names its line and a fix."""

from __future__ import annotations

import pytest

from hetflow.errors import Problem, SpecError
from hetflow.spec import GpuConstraint, Resources, Variant
from tests.unit.builders import GIB, MIB, load, load_steps, steps_yaml

# --- valid workflows -------------------------------------------------------------------


def test_single_image_step_becomes_variant_default() -> None:
    loaded = load_steps(
        """
        hello:
          image: alpine:3
          command: [echo, hi, 42]
          resources: {cpus: 2, memory: 1Gi}
          estimate: 1m30s
          env: {GREETING: hi}
        """
    )

    assert loaded.workflow.steps["hello"].resolved_variants() == {
        "default": Variant(
            image="alpine:3",
            command=("echo", "hi", "42"),  # YAML numbers in argv become strings
            resources=Resources(cpus=2, memory=GIB),
            estimate=90.0,
            env={"GREETING": "hi"},
        )
    }
    assert loaded.notes == ()


def test_variants_keep_their_own_resources_and_gpu_constraints() -> None:
    loaded = load_steps(
        """
        pool:
          variants:
            gpu:
              image: pool:cuda
              command: [pool, --device, cuda]
              resources: {gpus: 1, memory: 2Gi}
              gpu: {min_memory: 16Gi, min_compute_capability: 8, models: [A100, H100]}
            cpu:
              image: pool:cpu
              resources: {cpus: 4}
        """
    )

    variants = loaded.workflow.steps["pool"].resolved_variants()
    assert list(variants) == ["gpu", "cpu"]
    assert variants["gpu"].resources == Resources(cpus=1, memory=2 * GIB, gpus=1)
    assert variants["gpu"].gpu == GpuConstraint(
        min_memory=16 * GIB, min_compute_capability="8.0", models=("A100", "H100")
    )
    assert variants["gpu"].uses_gpu is True
    assert variants["cpu"].resources == Resources(cpus=4, memory=512 * MIB, gpus=0)
    assert variants["cpu"].uses_gpu is False


def test_step_env_is_merged_into_every_variant_and_a_variants_own_key_wins() -> None:
    loaded = load_steps(
        """
        pool:
          env: {MODE: fast, SHARED: "1"}
          variants:
            gpu: {image: g, env: {MODE: cuda}}
            cpu: {image: c}
        """
    )

    variants = loaded.workflow.steps["pool"].resolved_variants()
    assert variants["gpu"].env == {"MODE": "cuda", "SHARED": "1"}
    assert variants["cpu"].env == {"MODE": "fast", "SHARED": "1"}


PARAMS_WORKFLOW = """\
apiVersion: hetflow/v1
name: wf
params: {size: 1024, label: run, fast: true, ratio: 0.5}
steps:
  gen:
    image: gen
    command: [gen, "--size={{ params.size }}", "{{params.label}}-{{ params.size }}", "{{ params.fast }}"]
    env: {RATIO: "{{ params.ratio }}"}
  pool:
    variants:
      cpu:
        image: pool
        command: [pool, "{{ params.size }}"]
        env: {LABEL: "{{ params.label }}"}
"""

PARAM_CASES = [
    pytest.param(
        {},
        {"size": 1024, "label": "run", "fast": True, "ratio": 0.5},
        ("gen", "--size=1024", "run-1024", "true"),
        id="defaults",
    ),
    pytest.param(
        {"size": "4096"},
        {"size": 4096, "label": "run", "fast": True, "ratio": 0.5},
        ("gen", "--size=4096", "run-4096", "true"),
        id="override-int-stays-int",
    ),
    pytest.param(
        {"label": "big run", "fast": "false"},
        {"size": 1024, "label": "big run", "fast": False, "ratio": 0.5},
        ("gen", "--size=1024", "big run-1024", "false"),
        id="override-string-and-bool",
    ),
    pytest.param(
        {"size": 2048, "label": ""},
        {"size": 2048, "label": "", "fast": True, "ratio": 0.5},
        ("gen", "--size=2048", "-2048", "true"),
        id="typed-value-from-resume-and-empty-string",
    ),
]


@pytest.mark.parametrize(("overrides", "params", "command"), PARAM_CASES)
def test_params_are_templated_into_commands_and_env(
    overrides: dict[str, object], params: dict[str, object], command: tuple[str, ...]
) -> None:
    loaded = load(PARAMS_WORKFLOW, overrides)

    assert loaded.params == params
    assert all(type(loaded.params[k]) is type(v) for k, v in params.items())
    steps = loaded.workflow.steps
    assert steps["gen"].command == command
    assert steps["gen"].resolved_variants()["default"].env == {"RATIO": "0.5"}
    assert steps["pool"].resolved_variants()["cpu"].command == ("pool", str(params["size"]))
    assert steps["pool"].resolved_variants()["cpu"].env == {"LABEL": params["label"]}


@pytest.mark.parametrize(
    ("raw", "rendered"),
    [pytest.param("1.10", "1.10", id="version-like"), pytest.param("NO", "NO", id="norway")],
)
def test_override_of_a_string_param_keeps_the_text_as_given(raw: str, rendered: str) -> None:
    text = steps_yaml('t:\n  image: x\n  command: ["{{ params.tag }}"]\n').replace(
        "steps:\n", "params: {tag: latest}\nsteps:\n"
    )

    loaded = load(text, {"tag": raw})

    assert loaded.workflow.steps["t"].command == (rendered,)


def test_dependencies_are_needs_then_input_steps_in_first_seen_order() -> None:
    loaded = load_steps(
        """
        a: {image: x, outputs: [m.npy, n.npy]}
        b: {image: x, outputs: [dir/v.txt]}
        c:
          image: x
          needs: [b]
          inputs: {m: a/m.npy, v: b/dir, n: a/n.npy}
        """
    )

    assert loaded.workflow.steps["c"].dependencies() == ("b", "a")


def test_a_reserved_env_var_is_a_note_not_an_error() -> None:
    loaded = load_steps(
        """
        a:
          image: x
          env:
            OK: "1"
            NVIDIA_VISIBLE_DEVICES: all
        """
    )

    assert loaded.notes == (
        Problem(
            "wf.yaml",
            8,
            "step 'a' sets NVIDIA_VISIBLE_DEVICES, which hetflow sets itself "
            "(GPU isolation and hardening); the value is ignored",
            "note",
        ),
    )


# --- bad workflows: one problem each, on the line to change ----------------------------

V1 = "apiVersion: hetflow/v1\n"

BAD = [
    pytest.param(
        V1 + "name: wf\nsteps:\n  a:\n    image: x\n    outputs: [o]\n    sizes: {o: 1Gi, p: 2Mi}\n",
        7,
        "step 'a' gives a size for 'p', which is not in its outputs (declared: o)",
        id="size-of-undeclared-output",
    ),
    pytest.param(
        V1 + "name: wf\ndescripton: x\nsteps:\n  a: {image: x}\n",
        3,
        "unknown key 'descripton' in the top level (did you mean 'description'?); allowed keys: apiVersion, name,",
        id="unknown-top-key",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  need: [b]\n"),
        6,
        "unknown key 'need' in steps.a (did you mean 'needs'?)",
        id="unknown-step-key",
    ),
    pytest.param(
        steps_yaml("a:\n  variants:\n    cpu: {image: x, resorces: {cpus: 1}}\n"),
        6,
        "unknown key 'resorces' in steps.a.variants.cpu (did you mean 'resources'?)",
        id="unknown-variant-key",
    ),
    pytest.param(
        "name: wf\nsteps:\n  a: {image: x}\n", 1, "required key 'apiVersion' is missing", id="missing-apiversion"
    ),
    pytest.param(
        "name: wf\napiVersion: hetflow/v2\nsteps:\n  a: {image: x}\n",
        2,
        "apiVersion 'hetflow/v2' is not supported; write 'apiVersion: hetflow/v1'",
        id="wrong-apiversion",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  resources:\n    memory: 2Gx\n"),
        7,
        "'2Gx' is not a memory size; write e.g. 512Mi, 2Gi",
        id="bad-memory",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  estimate: 5 minutes\n"),
        6,
        "'5 minutes' is not a duration; write e.g. 20s, 4m or 1h30m",
        id="bad-duration",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  command: echo hi\n"),
        6,
        "command must be a list of arguments, e.g. [python3, /app/x.py] (got 'echo hi')",
        id="command-as-string",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  variants:\n    cpu: {image: y}\n"),
        4,
        "a step with 'variants' cannot also set image at step level; move them into each variant",
        id="image-and-variants",
    ),
    pytest.param(
        steps_yaml("a:\n  command: [x]\n"),
        4,
        "a step needs either 'image' (and 'command') or 'variants'",
        id="neither-image-nor-variants",
    ),
    pytest.param(
        steps_yaml("a:\n  variants: {}\n"), 4, "'variants' is empty; give at least one variant", id="empty-variants"
    ),
    pytest.param(
        steps_yaml("a:\n  variants:\n    GPU: {image: y}\n"),
        4,
        "variant name 'GPU' is not valid",
        id="invalid-variant-name",
    ),
    pytest.param(
        steps_yaml("generate: {image: x}\nb:\n  image: x\n  needs: [generat]\n"),
        7,
        "step 'b' needs unknown step 'generat' (did you mean 'generate'?)",
        id="unknown-needs",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  needs:\n    - a\n"),
        7,
        "step 'a' needs itself; remove it from 'needs'",
        id="self-need",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  needs: [b]\nb:\n  image: x\n  needs: [a]\n"),
        4,
        "the steps form a cycle: a -> b -> a (each needs the next); break one of these dependencies",
        id="cycle",
    ),
    pytest.param(
        steps_yaml("a: {image: x}\nb:\n  image: x\n  needs: [c]\nc:\n  image: x\n  needs: [b]\n"),
        5,
        "the steps form a cycle: b -> c -> b",
        id="cycle-not-through-the-first-step",
    ),
    pytest.param(
        steps_yaml("a: {image: x, outputs: [m.npy]}\nb:\n  image: x\n  inputs:\n    m: a/n.npy\n"),
        8,
        "input 'm' of step 'b' reads 'n.npy', which step 'a' does not declare in 'outputs' (it declares: m.npy)",
        id="input-not-declared",
    ),
    pytest.param(
        steps_yaml("a: {image: x, outputs: [m.npy]}\nb:\n  image: x\n  inputs:\n    m: a/../m.npy\n"),
        8,
        "input 'm' of step 'b': path '../m.npy' must not contain '..'",
        id="input-with-dotdot",
    ),
    pytest.param(
        steps_yaml("a: {image: x, outputs: [m.npy]}\nb:\n  image: x\n  inputs:\n    m: a\n"),
        8,
        "input 'm' of step 'b' is 'a'; write STEP/OUTPUT",
        id="input-without-path",
    ),
    pytest.param(
        steps_yaml("a: {image: x}\nb:\n  image: x\n  inputs:\n    m: gen/m.npy\n"),
        8,
        "input 'm' of step 'b' reads from unknown step 'gen'",
        id="input-from-unknown-step",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  outputs:\n    - /data/m.npy\n"),
        7,
        "output '/data/m.npy' of step 'a' must be a relative path inside /out",
        id="absolute-output",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  outputs:\n    - sub/../../m\n"),
        7,
        "output 'sub/../../m' of step 'a' must not contain '..'",
        id="output-escaping-out",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  outputs:\n    - m.npy\n    - ./m.npy\n"),
        8,
        "output './m.npy' of step 'a' is listed twice",
        id="duplicate-output",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  outputs: [m]\n  optional: true\nb:\n  image: x\n  inputs: {m: a/m}\n"),
        7,
        "step 'a' is optional but 'b' depend(s) on it; a skipped step would leave them without inputs",
        id="optional-with-dependents",
    ),
    pytest.param(
        V1
        + "name: wf\nparams: {size: 1}\nsteps:\n  a:\n    image: x\n"
        + "    command:\n      - run\n      - '{{ params.sise }}'\n",
        9,
        "'{{ params.sise }}' names no param (did you mean 'size'?); declare it under 'params'",
        id="unknown-template-param",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  env: {X: '{{ size }}'}\n"),
        6,
        "'{{ size }}' names nothing; write '{{ params.NAME }}', or in a fan-out step '{{ item }}'",
        id="template-without-params-prefix",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  retries: -1\n"),
        6,
        "steps.a.retries: Input should be greater than or equal to 0 (got -1)",
        id="negative-retries",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\n  gpu: {min_compute_capability: eight}\n"),
        6,
        '\'eight\' is not a compute capability; write e.g. "7.0" or "8.6"',
        id="bad-compute-capability",
    ),
    pytest.param(
        steps_yaml("a:\n  image: x\na:\n  image: y\n"), 6, "duplicate key 'a'; keep only one", id="duplicate-yaml-key"
    ),
    pytest.param(steps_yaml("a:\n  image: x\n  command: [echo\n"), 7, "not valid YAML", id="invalid-yaml"),
    pytest.param("", 1, "the file is empty; a workflow needs apiVersion, name and steps", id="empty-file"),
    pytest.param("# only a comment\n", 1, "the file is empty", id="comments-only"),
    pytest.param("- a\n- b\n", 1, "a workflow is a YAML mapping with apiVersion, name and steps", id="not-a-mapping"),
    pytest.param(V1 + "name: wf\nsteps: {}\n", 3, "steps: Dictionary should have at least 1 item", id="no-steps"),
    # The line is that of 'steps:', not of the bad name: a field validator sees the whole mapping.
    pytest.param(
        steps_yaml("Align: {image: x}\n"),
        3,
        "step name 'Align' is not valid: use 1-63 lowercase letters",
        id="invalid-step-name",
    ),
    pytest.param(
        V1 + "name: My Flow\nsteps:\n  a: {image: x}\n",
        2,
        "workflow name 'My Flow' is not valid",
        id="invalid-workflow-name",
    ),
]


@pytest.mark.parametrize(("text", "line", "phrase"), BAD)
def test_bad_workflow_is_one_error_on_the_line_to_change(text: str, line: int, phrase: str) -> None:
    with pytest.raises(SpecError) as info:
        load(text)

    errors = [p for p in info.value.problems if p.severity == "error"]
    assert [(p.file, p.line) for p in errors] == [("wf.yaml", line)], errors
    assert phrase in errors[0].message
    assert f"wf.yaml:{line}: error: " in str(info.value)


def test_every_problem_is_reported_at_once() -> None:
    text = steps_yaml(
        """
        a:
          image: x
          needs: [a]
          outputs: [/abs]
        b:
          image: x
          needs: [zzz]
        """
    )

    with pytest.raises(SpecError) as info:
        load(text)

    assert [(p.line, p.message.split(";")[0]) for p in info.value.problems] == [
        (6, "step 'a' needs itself"),
        (10, "step 'b' needs unknown step 'zzz'"),
        (7, "output '/abs' of step 'a' must be a relative path inside /out"),
    ]


OVERRIDE_ERRORS = [
    pytest.param(
        V1 + "name: wf\nparams:\n  size: 1\nsteps:\n  a: {image: x}\n",
        {"sise": "2"},
        3,
        "-p sise=...: the workflow declares no param 'sise' (did you mean 'size'?) (declared: size)",
        id="undeclared-with-hint",
    ),
    pytest.param(
        steps_yaml("a: {image: x}\n"),
        {"size": "2"},
        1,
        "-p size=...: the workflow declares no param 'size' (declared: none)",
        id="no-params-at-all",
    ),
]


@pytest.mark.parametrize(("text", "overrides", "line", "message"), OVERRIDE_ERRORS)
def test_override_of_an_undeclared_param_is_an_error(
    text: str, overrides: dict[str, object], line: int, message: str
) -> None:
    with pytest.raises(SpecError) as info:
        load(text, overrides)

    assert info.value.problems == [Problem("wf.yaml", line, message)]


# --- bugs found while writing these tests ----------------------------------------------


def test_an_input_from_the_step_itself_is_an_error() -> None:
    text = steps_yaml("a:\n  image: x\n  outputs: [o]\n  inputs:\n    m: a/o\n")

    with pytest.raises(SpecError) as info:
        load(text)

    assert [p.line for p in info.value.problems] == [8]


def test_infinite_memory_is_a_spec_error_not_a_crash() -> None:
    with pytest.raises(SpecError) as info:
        load(steps_yaml("a:\n  image: x\n  resources: {memory: .inf}\n"))

    assert [p.line for p in info.value.problems] == [6]


def test_a_step_name_with_a_trailing_newline_is_rejected() -> None:
    with pytest.raises(SpecError):
        load(steps_yaml('"a\\n": {image: x}\n'))


# --- S3 publish endpoints ------------------------------------------------------------------

MINIO, OTHER = "http://127.0.0.1:9000", "http://10.0.0.2:9000"
TWO = {"a": f"{{url: s3://a/, endpoint: {MINIO}}}", "b": f"{{url: s3://b/, endpoint: {OTHER}}}"}


@pytest.mark.parametrize(
    ("data", "publish", "endpoint"),
    [
        ({"in": f"{{url: s3://in/, endpoint: {MINIO}}}"}, "{to: s3://out/r/}", MINIO),
        (TWO, "{to: s3://b/r/}", OTHER),
        (TWO, "{to: s3://c/r/}", None),
        ({"a": f"{{url: s3://a/, endpoint: {MINIO}}}", "b": "s3://b/"}, "{to: s3://b/r/}", None),
        ({"in": f"{{url: s3://in/, endpoint: {MINIO}}}"}, f"{{to: s3://out/r/, endpoint: {OTHER}}}", OTHER),
        ({"in": "s3://in/"}, "{to: s3://out/r/}", None),
        ({"in": f"{{url: s3://in/, endpoint: {MINIO}}}"}, "{to: results}", None),
    ],
    ids=["the-one-declared", "same-bucket", "ambiguous", "same-bucket-without", "its-own-wins", "none", "host-dir"],
)
def test_an_s3_publish_takes_the_endpoint_the_data_declares(
    data: dict[str, str], publish: str, endpoint: str | None
) -> None:
    declared = "".join(f"  {name}: {entry}\n" for name, entry in data.items())
    step = f"  s:\n    image: i\n    outputs: [r]\n    publish: {publish}\n"
    loaded = load(V1 + f"name: w\ndata:\n{declared}steps:\n{step}")
    (pub,) = loaded.workflow.steps["s"].publish
    assert pub.endpoint == endpoint
