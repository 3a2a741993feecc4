"""Profiles, params files and resource overrides: one precedence order (settings file <
profiles < params file < -p), resources by template or step, every bad input named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hetflow.errors import HetflowError, SpecError, UsageError
from hetflow.execute.layers import apply_resources, layer_params, read_params_file, split_profiles
from hetflow.execute.settings import Settings, load_settings
from hetflow.spec import parse_workflow

WORKFLOW = """\
apiVersion: hetflow/v1
name: w
params:
  lr: wf
  epochs: 1
templates:
  py:
    image: busybox
    resources: {memory: 64Mi, cpus: 1}
steps:
  prep:
    use: py
    command: [echo, "{{ params.lr }}"]
  train:
    variants:
      cpu: {image: busybox, command: [echo], resources: {cpus: 2}}
      gpu: {image: busybox, command: [echo], resources: {cpus: 1, gpus: 1}}
  fan:
    image: busybox
    command: [echo, "{{ item }}"]
    foreach: [a, b]
"""

CONFIG = """\
params:
  lr: config
profiles:
  a:
    params: {lr: profile-a}
    resources: {template: {py: {memory: 96Mi}}}
  b:
    params: {lr: profile-b}
    resources: {template: {py: {memory: 128Mi}}, step: {prep: {cpus: 3}, fan: {memory: 32Mi}}}
  slurm: {backend: slurm, cluster: /c.yaml, slurm: {partition: gpu}}
"""


def _load(
    tmp_path: Path, *, profiles: tuple[str, ...] = (), params_file: str | None = None, cli: dict[str, str] | None = None
) -> tuple[Settings, dict[str, object]]:
    (tmp_path / "config.yaml").write_text(CONFIG)
    settings = load_settings(None, tmp_path, {}, profiles=profiles)
    from_file = None
    if params_file is not None:
        (tmp_path / "p.yaml").write_text(params_file)
        from_file = read_params_file(tmp_path / "p.yaml")
    params, origins = layer_params(settings.params, settings.param_origins, from_file, cli or {})
    loaded = parse_workflow(WORKFLOW, "w.yaml", params, origins=origins)
    return settings, dict(loaded.params)


@pytest.mark.parametrize(
    ("profiles", "params_file", "cli", "lr"),
    [
        ((), None, None, "config"),
        (("a",), None, None, "profile-a"),
        (("a", "b"), None, None, "profile-b"),
        (("b", "a"), None, None, "profile-a"),
        (("a", "b"), "lr: file\n", None, "file"),
        (("a", "b"), "lr: file\n", {"lr": "cli"}, "cli"),
    ],
    ids=[
        "settings-file",
        "profile-over-file",
        "later-profile-wins",
        "order-is-given",
        "params-file-over-profile",
        "p-over-all",
    ],
)
def test_each_level_wins_over_the_one_before(
    tmp_path: Path, profiles: tuple[str, ...], params_file: str | None, cli: dict[str, str] | None, lr: str
) -> None:
    _, params = _load(tmp_path, profiles=profiles, params_file=params_file, cli=cli)
    assert params["lr"] == lr
    assert params["epochs"] == 1  # what no level names keeps the workflow's default


def test_a_params_file_may_be_json_and_keeps_its_types(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text('{"epochs": 5, "lr": "0.1"}')
    params, origins = read_params_file(tmp_path / "p.json")
    assert params == {"epochs": 5, "lr": "0.1"}
    assert origins["epochs"].file == str(tmp_path / "p.json")


def test_a_profile_sets_settings_keys_and_wins_over_the_environment(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(CONFIG)
    s = load_settings(None, tmp_path, {"HETFLOW_SLURM_PARTITION": "cpu"}, profiles=("slurm",))
    assert (s.backend, s.cluster, dict(s.section("slurm"))) == ("slurm", "/c.yaml", {"partition": "gpu"})
    s = load_settings(None, tmp_path, {}, backend="local", profiles=("slurm",))
    assert s.backend == "local"  # the command line's own flag wins over a profile


def test_resource_overrides_go_by_template_then_step_and_are_recorded(tmp_path: Path) -> None:
    settings, _ = _load(tmp_path, profiles=("a", "b"))
    assert Settings.from_json(settings.to_json()).resources == settings.resources
    assert Settings.from_json(settings.to_json()).profiles == ("a", "b")
    loaded = apply_resources(
        parse_workflow(WORKFLOW, "w.yaml"), settings.resources, settings.resource_origins, strict=True
    )
    steps = loaded.workflow.steps
    prep = steps["prep"].resolved_variants()["default"].resources
    assert (prep.memory, prep.cpus) == (128 * 2**20, 3.0)  # the later profile's template memory, the step's cpus
    assert [steps[f"fan.{i}"].resolved_variants()["default"].resources.memory for i in (0, 1)] == [32 * 2**20] * 2
    assert steps["train"] == parse_workflow(WORKFLOW, "w.yaml").workflow.steps["train"]  # named by nothing


def test_every_variant_of_a_named_step_is_overridden() -> None:
    loaded = parse_workflow(WORKFLOW, "w.yaml")
    out = apply_resources(loaded, {"step": {"train": {"memory": "1Gi"}}}, strict=True)
    variants = out.workflow.steps["train"].resolved_variants()
    assert {v.resources.memory for v in variants.values()} == {2**30}
    assert variants["gpu"].resources.gpus == 1  # fields not named keep their value


def test_a_settings_file_param_the_workflow_lacks_is_skipped_with_a_note(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("params:\n  lr: x\n  batch: 32\n")
    settings = load_settings(None, tmp_path, {})
    params, origins = layer_params(settings.params, settings.param_origins, None, {})
    loaded = parse_workflow(WORKFLOW, "w.yaml", params, origins=origins)
    assert "batch" not in loaded.params
    (note,) = loaded.notes
    assert (note.file, note.line, note.severity) == (str(tmp_path / "config.yaml"), 3, "note")
    assert "declares no param 'batch'" in note.message


def test_what_a_profile_names_must_exist_what_the_top_level_names_may_not(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "params: {batch: 32}\nresources: {template: {java: {cpus: 2}}}\n"
        "profiles:\n  p: {params: {batch: 64}}\n  r: {resources: {template: {java: {cpus: 4}}}}\n"
    )
    settings = load_settings(None, tmp_path, {})
    loaded = apply_resources(
        parse_workflow(WORKFLOW, "w.yaml"), settings.resources, settings.resource_origins, strict=True
    )
    assert [(n.line, n.severity) for n in loaded.notes] == [(2, "note")]
    assert "has no template 'java'" in loaded.notes[0].message
    settings = load_settings(None, tmp_path, {}, profiles=("p",))
    params, origins = layer_params(settings.params, settings.param_origins, None, {})
    lacks = "profile 'p': param 'batch': workflow w.yaml declares no param 'batch'"
    with pytest.raises(SpecError, match=re.escape(lacks)):
        parse_workflow(WORKFLOW, "w.yaml", params, origins=origins)
    settings = load_settings(None, tmp_path, {}, profiles=("r",))
    lacks = "profile 'r': resources.template.java: workflow 'w' has no template 'java'"
    with pytest.raises(SpecError, match=re.escape(lacks)):
        apply_resources(parse_workflow(WORKFLOW, "w.yaml"), settings.resources, settings.resource_origins, strict=True)


def test_a_recorded_run_skips_an_override_its_edited_file_no_longer_matches() -> None:
    loaded = parse_workflow(WORKFLOW, "w.yaml")
    assert apply_resources(loaded, {"step": {"gone": {"cpus": 2}}}, strict=False) == loaded


@pytest.mark.parametrize(
    ("config", "profiles", "params_file", "message"),
    [
        (CONFIG, ("gpu",), None, "--profile gpu: {d}/config.yaml has no profile 'gpu'; its profiles: a, b, slurm"),
        (CONFIG, ("sllurm",), None, "has no profile 'sllurm' (did you mean 'slurm'?)"),
        ("backend: local\n", ("a",), None, "has no profile 'a'; its profiles: none (add a 'profiles:' section)"),
        (None, ("a",), None, "--profile a: there is no settings file ({d}/config.yaml)"),
        ("profiles: [a]\n", ("a",), None, "{d}/config.yaml:1: profiles is a mapping"),
        ("profiles:\n  a: gpu\n", ("a",), None, "{d}/config.yaml:2: profile 'a' is the string 'gpu'; a profile is a"),
        ("profiles:\n  a: {bakend: slurm}\n", ("a",), None, "config.yaml:2: profile 'a': unknown key(s) bakend"),
        ("params: [lr]\n", (), None, "{d}/config.yaml:1: params is a mapping of param names to values"),
        ("params:\n  lr: {a: 1}\n", (), None, "config.yaml:2: params.lr is a mapping; a param is a string"),
        (
            "resources: {label: {gpu: {cpus: 2}}}\n",
            (),
            None,
            "resources are overridden by 'template' (a step's use:) or 'step' (its name), not 'label'",
        ),
        (
            "profiles:\n  a:\n    resources:\n      step:\n        train: {memroy: 2Gi}\n",
            ("a",),
            None,
            "config.yaml:5: profiles.a.resources.step.train: 'memroy' is no resource field (did you mean 'memory'?)",
        ),
        ("resources: {step: {train: {memory: lots}}}\n", (), None, "resources.step.train: memory: "),
        ("resources: {step: {train: 2}}\n", (), None, "resources.step.train: give a mapping of resource fields"),
        ("", (), "- lr\n", "{d}/p.yaml:1: a params file is a mapping of param names to values"),
        ("", (), "lr: [1, {a: 2}]\n", "{d}/p.yaml:1: lr is a list; a param is a string, number, boolean"),
        ("", (), "bogus\n", "this one holds the string 'bogus'"),
    ],
    ids=[
        "unknown-profile",
        "profile-did-you-mean",
        "no-profiles-section",
        "profile-without-a-file",
        "profiles-not-a-mapping",
        "profile-not-a-mapping",
        "profile-unknown-key",
        "params-not-a-mapping",
        "param-value-a-mapping",
        "resources-by-label",
        "resource-field-typo",
        "resource-bad-value",
        "resource-not-a-mapping",
        "params-file-a-list",
        "params-file-value-nested",
        "params-file-a-scalar",
    ],
)
def test_bad_settings_and_params_files_are_named(
    tmp_path: Path, config: str | None, profiles: tuple[str, ...], params_file: str | None, message: str
) -> None:
    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
    with pytest.raises(UsageError) as info:
        load_settings(None, tmp_path, {}, profiles=profiles)
        assert params_file is not None
        (tmp_path / "p.yaml").write_text(params_file)
        read_params_file(tmp_path / "p.yaml")
    assert message.format(d=tmp_path) in str(info.value)


@pytest.mark.parametrize(
    ("params_file", "overrides", "where", "message"),
    [
        (
            "epochs: 2\nlrr: 0.1\n",
            {},
            ("p.yaml", 2),
            "param 'lrr': workflow w.yaml declares no param 'lrr' (did you mean 'lr'?)",
        ),
        (
            None,
            {"template": {"pyy": {"cpus": 2}}},
            ("config.yaml", 3),
            "resources.template.pyy: workflow 'w' has no template 'pyy' (did you mean 'py'?); its templates: py",
        ),
        (None, {"step": {"trian": {"cpus": 2}}}, ("config.yaml", 3), "has no step 'trian' (did you mean 'train'?)"),
        (
            None,
            {"step": {"prep": {"gpu_share": 0.5, "gpus": 1}}},
            ("config.yaml", 3),
            "resources override of step 'prep': ",
        ),
    ],
    ids=["params-file-unknown-param", "unknown-template", "unknown-step", "override-makes-bad-resources"],
)
def test_what_the_workflow_lacks_is_named_where_it_was_written(
    tmp_path: Path,
    params_file: str | None,
    overrides: dict[str, dict[str, dict[str, object]]],
    where: tuple[str, int],
    message: str,
) -> None:
    from_file = None
    if params_file is not None:
        (tmp_path / "p.yaml").write_text(params_file)
        from_file = read_params_file(tmp_path / "p.yaml")
    params, origins = layer_params({}, {}, from_file, {})
    from hetflow.spec import Origin

    written = {(k, n): Origin(str(tmp_path / "config.yaml"), 3) for k, named in overrides.items() for n in named}
    with pytest.raises(SpecError) as info:
        loaded = parse_workflow(WORKFLOW, "w.yaml", params, origins=origins)
        apply_resources(loaded, overrides, written, strict=True)
    (problem,) = [p for p in info.value.problems if p.severity == "error"]
    assert (problem.file, problem.line) == (str(tmp_path / where[0]), where[1])
    assert message in problem.message


@pytest.mark.parametrize(
    ("options", "names"),
    [(["a"], ["a"]), (["slurm,gpu"], ["slurm", "gpu"]), (["a", "b,c"], ["a", "b", "c"]), (["a,"], None)],
    ids=["one", "comma-list", "repeated", "empty-name"],
)
def test_profile_options_are_split_in_order(options: list[str], names: list[str] | None) -> None:
    if names is None:
        with pytest.raises(HetflowError, match="give profile names separated by commas"):
            split_profiles(options)
    else:
        assert split_profiles(options) == names
