"""The workflow format's data, publish, fan-out (foreach, matrix) and templates (use, include):
what the loader expands, and a file:line error for each bad form."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.errors import SpecError
from hetflow.spec import MAX_FANOUT_ITEMS, compose_yaml, parse_workflow
from hetflow.spec.expansion.matrix import matrix_axes

V1 = "apiVersion: hetflow/v1\nname: wf\n"


def load(text: str, base: Path | None = None, **overrides: object):  # type: ignore[no-untyped-def]
    return parse_workflow(text, "wf.yaml", overrides or None, base=base or Path("/base"))


def errors_of(text: str, base: Path | None = None) -> list[tuple[int, str]]:
    with pytest.raises(SpecError) as info:
        load(text, base)
    return [(p.line, p.message) for p in info.value.problems if p.severity == "error"]


def test_foreach_list_gives_one_step_per_item_and_gather_reads_every_item() -> None:
    wf = load(
        V1
        + """steps:
  align:
    image: x
    foreach: [s1, s2, s3]
    command: [align, "{{ item }}", "{{ index }}"]
    outputs: [out.txt]
  merge:
    image: x
    inputs: {parts: align/out.txt}
    outputs: [all.txt]
"""
    ).workflow
    assert list(wf.steps) == ["align.0", "align.1", "align.2", "merge"]
    assert wf.steps["align.1"].command == ("align", "s2", "1")
    assert wf.steps["align.2"].foreach is None
    assert wf.steps["merge"].inputs == {
        "parts/0": "align.0/out.txt",
        "parts/1": "align.1/out.txt",
        "parts/2": "align.2/out.txt",
    }
    assert wf.steps["merge"].dependencies() == ("align.0", "align.1", "align.2")


def test_foreach_range_params_list_and_needs_are_expanded() -> None:
    wf = load(
        V1
        + """params: {samples: [{id: a, n: 1}, {id: b, n: 2}]}
steps:
  r:
    image: x
    foreach: {range: [2, 8, 3]}
    command: [echo, "{{ item }}"]
  p:
    image: x
    foreach: "{{ params.samples }}"
    command: [run, "{{ item.id }}", "{{ item.n }}"]
    env: {ID: "{{ item.id }}"}
  after:
    image: x
    needs: [r, p]
"""
    ).workflow
    assert [wf.steps[s].command for s in ("r.0", "r.1")] == [("echo", "2"), ("echo", "5")]
    assert wf.steps["p.1"].command == ("run", "b", "2")
    assert wf.steps["p.0"].env == {"ID": "a"}
    assert wf.steps["after"].needs == ("r.0", "r.1", "p.0", "p.1")


def test_list_param_can_be_overridden_from_the_command_line() -> None:
    text = V1 + "params: {samples: [a]}\nsteps:\n  s:\n    image: x\n    foreach: '{{ params.samples }}'\n"
    wf = load(text, samples="[x, y, z]").workflow
    assert list(wf.steps) == ["s.0", "s.1", "s.2"]


def test_matrix_with_exclude_gives_the_product_minus_the_excluded() -> None:
    wf = load(
        V1
        + """steps:
  t:
    image: "img:{{ item.py }}"
    matrix:
      py: ["3.10", "3.11"]
      os: [deb, alp]
      exclude: [{py: "3.10", os: alp}]
    command: [test, "{{ item.py }}-{{ item.os }}"]
"""
    ).workflow
    assert [s.command[1] for s in wf.steps.values()] == ["3.10-deb", "3.11-deb", "3.11-alp"]
    assert wf.steps["t.0"].image == "img:3.10"


def test_pending_fanout_stays_one_step_that_depends_on_its_source() -> None:
    wf = load(
        V1
        + """steps:
  split:
    image: x
    outputs: [chunks]
  work:
    image: x
    foreach: {files: split/chunks}
    inputs: {chunk: "{{ item.path }}"}
    command: [wc, "/in/chunk/{{ item.name }}"]
    outputs: [n.txt]
  sum:
    image: x
    inputs: {all: work/n.txt}
"""
    ).workflow
    assert list(wf.steps) == ["split", "work", "sum"]
    assert wf.steps["work"].dependencies() == ("split",)
    assert wf.steps["work"].command == ("wc", "/in/chunk/{{ item.name }}")


def test_data_and_publish_paths_are_made_absolute_against_the_workflow_dir(tmp_path: Path) -> None:
    wf = load(
        V1
        + """data:
  reads: inputs/*.txt
  ref: {path: /abs/ref.fa}
  bucket: s3://b/prefix/
steps:
  a:
    image: x
    inputs: {r: data.ref, one: data.reads/x.txt}
    outputs: [o.txt]
    publish: {to: results}
publish:
  - {from: a/o.txt, to: s3://out/p/, mode: overwrite}
""",
        base=tmp_path,
    ).workflow
    assert wf.data["reads"].path == str(tmp_path / "inputs/*.txt")
    assert wf.data["ref"].path == "/abs/ref.fa"
    assert wf.data["bucket"].url == "s3://b/prefix/"
    assert [(p.to, p.outputs, p.mode) for p in wf.steps["a"].publish] == [
        (str(tmp_path / "results"), (), "copy"),
        ("s3://out/p/", ("o.txt",), "overwrite"),
    ]
    assert wf.steps["a"].dependencies() == ()


def test_use_merges_a_template_deeply_and_the_step_wins(tmp_path: Path) -> None:
    (tmp_path / "lib.yaml").write_text(
        "templates:\n  base:\n    image: lib-img\n    resources: {cpus: 2, memory: 4Gi}\n    env: {A: '1', B: '2'}\n"
    )
    text = (
        V1
        + """include: [lib.yaml]
templates:
  big:
    use: base
    resources: {memory: 8Gi}
steps:
  a:
    use: big
    env: {B: three}
    command: [run]
"""
    )
    step = load(text, base=tmp_path).workflow.steps["a"]
    assert step.image == "lib-img"
    assert step.resources is not None
    assert (step.resources.cpus, step.resources.memory) == (2, 8 * 1024**3)
    assert step.env == {"A": "1", "B": "three"}
    assert step.use == "big"


def test_an_error_in_a_template_points_at_the_template_line() -> None:
    text = V1 + "templates:\n  t:\n    image: x\n    retries: -1\nsteps:\n  a:\n    use: t\n"
    [(line, msg)] = errors_of(text)
    assert line == 6 and "retries" in msg


@pytest.mark.parametrize(
    ("body", "line", "phrase"),
    [
        ("steps:\n  a:\n    image: x\n    foreach: 3\n", 6, "is 3, not a list"),
        (
            "params: {n: 4}\nsteps:\n  a:\n    image: x\n    foreach: '{{ params.n }}'\n",
            7,
            "param 'n' is 4, not a list",
        ),
        ("steps:\n  a:\n    image: x\n    foreach: '{{ params.zz }}'\n", 6, "names no param 'zz'"),
        ("steps:\n  a:\n    image: x\n    foreach: {range: [1, 2, 0]}\n", 6, "range: N or range: [START, STOP, STEP]"),
        ("steps:\n  a:\n    image: x\n    foreach: [1]\n    command: ['{{ itme }}']\n", 7, "did you mean 'item'?"),
        (
            "steps:\n  a:\n    image: x\n    command: ['{{ item }}']\n",
            6,
            "only defined in a step with 'foreach' or 'matrix'",
        ),
        (
            "steps:\n  a:\n    image: x\n    foreach: [{k: 1}]\n    command: ['{{ item.j }}']\n",
            7,
            "the items have item.k",
        ),
        (
            "steps:\n  a:\n    image: x\n    foreach: [{k: 1}]\n    command: ['{{ item }}']\n",
            7,
            "use '{{ item.FIELD }}'",
        ),
        ("steps:\n  a:\n    image: x\n    matrix: {x: [1], exclude: [{y: 1}]}\n", 6, "unknown axis 'y'"),
        ("steps:\n  a:\n    image: x\n    matrix: {x: []}\n", 6, "non-empty list"),
        ("steps:\n  a:\n    image: x\n    foreach: [1]\n    matrix: {x: [1]}\n", 7, "has both 'foreach' and 'matrix'"),
        ("steps:\n  a:\n    image: x\n    foreach: {files: nowhere}\n", 6, "give data.NAME"),
        ("steps:\n  a:\n    image: x\n    foreach: {lines: data.nope}\n", 6, "no data 'nope'"),
        ("steps:\n  a:\n    image: x\n    inputs: {r: data.reeds}\n", 6, "no data 'reeds'"),
        ("data: {reads: {path: a, url: s3://b/k}}\nsteps:\n  a:\n    image: x\n", 3, "exactly one of 'path'"),
        ("data: {reads: http://x/y}\nsteps:\n  a:\n    image: x\n", 3, "not supported; write s3://"),
        ("steps:\n  a:\n    image: x\n    publish: {to: out, mode: move}\n", 6, "mode"),
        ("steps:\n  a:\n    image: x\n    outputs: [o]\n    publish: {to: out, outputs: [p]}\n", 7, "publishes 'p'"),
        ("steps:\n  a:\n    use: nope\n", 5, "'use: nope' names no template"),
        ("templates: {t: {use: u}, u: {use: t}}\nsteps:\n  a:\n    use: t\n", 6, "cycle"),
        ("include: [missing.yaml]\nsteps:\n  a:\n    image: x\n", 3, "cannot read"),
        ("steps:\n  data:\n    image: x\n", 3, "'data' cannot name a step"),
        (
            "steps:\n  a:\n    image: x\n    foreach: [1, 2]\n    outputs: [o]\n"
            "  b:\n    image: x\n    inputs: {i: a/o}\n    outputs: [o]\n"
            "  c:\n    image: x\n    foreach: [1]\n    inputs: {i: b/o}\n    needs: []\n",
            0,
            "",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None,
)
def test_bad_fanout_data_publish_and_templates_get_a_line_and_a_fix(body: str, line: int, phrase: str) -> None:
    text = V1 + body
    if not phrase:  # a well-formed file: the control that the cases fail for their reason
        load(text)
        return
    errs = errors_of(text)
    assert any(phrase in m for _, m in errs), errs
    assert next(ln for ln, m in errs if phrase in m) == line, errs


def test_a_cycle_made_by_expansion_is_reported() -> None:
    text = V1 + (
        "steps:\n  a:\n    image: x\n    foreach: [1, 2]\n    needs: [b]\n    outputs: [o]\n"
        "  b:\n    image: x\n    inputs: {i: a/o}\n"
    )
    assert any("cycle" in m for _, m in errors_of(text))


BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("text", "line", "phrase"),
    [
        (BOMB, 7, "an alias bomb?"),
        ("a: " + "[" * 2000 + "]" * 2000, 1, "nest"),
        ("a: !custom x\n", 1, "unknown YAML tag '!custom'"),
        ("a: *nowhere\n", 1, "alias *nowhere names no anchor"),
        ("a: 1\n---\nb: 2\n", 2, "one YAML document"),
        ("{[1]: x}\n", 1, "a mapping key must be a plain value"),
        ("a: 1\na: 2\n", 2, "duplicate key 'a'"),
    ],
    ids=["alias-bomb", "deep-nesting", "unknown-tag", "unknown-alias", "two-documents", "list-as-key", "dup-key"],
)
def test_hostile_yaml_gets_a_line_not_a_traceback(text: str, line: int, phrase: str) -> None:
    _, _, problems = compose_yaml(text, "h.yaml")
    assert any(phrase in p.message and p.line == line for p in problems), problems


def test_merge_keys_take_a_mapping_and_explicit_keys_win() -> None:
    text = (
        V1
        + "templates:\n  base: &b {image: x, command: [a], env: {K: v}}\nsteps:\n  s:\n    <<: *b\n    command: [b]\n"
    )
    step = load(text).workflow.steps["s"]
    assert (step.image, step.command, step.env) == ("x", ("b",), {"K": "v"})


# --- sizes computed, not listed (issue 37) --------------------------------------------------

VALUES = st.sampled_from([0, 1, 2, True, "a", "b", 1.0])


@settings(max_examples=300, deadline=None)
@given(
    axes=st.lists(st.lists(VALUES, min_size=1, max_size=4), min_size=1, max_size=4),
    exclude=st.lists(st.dictionaries(st.integers(0, 3), VALUES, max_size=3), max_size=4),
)
def test_a_matrix_size_and_items_are_what_listing_every_combination_gives(
    axes: list[list[object]], exclude: list[dict[int, object]]
) -> None:
    names = [f"x{i}" for i in range(len(axes))]
    rules = [{names[k]: v for k, v in e.items() if k < len(axes)} for e in exclude]
    m, problems = matrix_axes(
        "s", {**dict(zip(names, axes, strict=True)), "exclude": rules}, {}, "wf.yaml", lambda _: 1
    )
    assert m is not None and not problems
    combos = [dict(zip(names, c, strict=True)) for c in itertools.product(*axes)]
    listed = [c for c in combos if not any(all(c.get(k) == v for k, v in e.items()) for e in rules)]
    assert m.size() == len(listed)
    assert m.items() == listed  # same items, same order: an item's index is its name


@pytest.mark.parametrize(
    ("fan", "size"),
    [
        ("foreach: {range: 1000000000000}", 10**12),
        ("foreach: {range: [5, 100000006]}", 100000001),
        ("foreach: {range: [0, -1000000000, -3]}", 333333334),
        (
            "matrix: {a: [" + ", ".join(map(str, range(1000))) + "], b: [" + ", ".join(map(str, range(1000))) + "]}",
            10**6,
        ),
    ],
    ids=["range", "range-start", "range-negative-step", "matrix"],
)
def test_a_fanout_over_the_limit_is_refused_with_its_size(fan: str, size: int) -> None:
    errs = errors_of(V1 + f"steps:\n  a:\n    image: x\n    {fan}\n")
    assert errs == [(6, f"step 'a' fans out to {size} items; at most {MAX_FANOUT_ITEMS}")]


def test_a_matrix_of_many_combinations_mostly_excluded_fits() -> None:
    axis = "[" + ", ".join(map(str, range(100))) + "]"
    exclude = ", ".join(f"{{p: {i}}}" for i in range(1, 100))
    wf = load(
        V1 + f"steps:\n  a:\n    image: x\n    matrix: {{p: {axis}, q: {axis}, r: {axis}, exclude: [{exclude}]}}\n"
    )
    assert len(wf.workflow.steps) == 100 * 100  # p: 0 only, of 10^6 combinations


# --- params fill every templated field (issue 37) -------------------------------------------

TEMPLATED = (
    V1
    + """params: {to: res, name: r.txt, tag: "1.0", sub: d}
steps:
  a:
    image: "busybox:{{ params.tag }}"
    command: [sh, -c, "echo > /out/{{ params.name }}"]
    outputs: ["{{ params.name }}"]
    sizes: {"{{ params.name }}": 1Mi}
    publish: {to: "{{ params.to }}/{{ params.sub }}", outputs: ["{{ params.name }}"]}
  b:
    image: x
    inputs: {i: "a/{{ params.name }}"}
"""
)


def test_params_fill_image_outputs_sizes_inputs_and_publish() -> None:
    wf = load(TEMPLATED, to="elsewhere").workflow
    a, b = wf.steps["a"], wf.steps["b"]
    assert a.image == "busybox:1.0" and a.outputs == ("r.txt",) and set(a.sizes) == {"r.txt"}
    assert [(p.to, p.outputs) for p in a.publish] == [("/base/elsewhere/d", ("r.txt",))]
    assert b.inputs == {"i": "a/r.txt"} and b.dependencies() == ("a",)


def test_params_fill_a_workflow_level_publish_and_items_fill_it_too() -> None:
    wf = load(
        V1 + "params: {to: res}\nsteps:\n  a:\n    image: x\n    foreach: [u, v]\n    outputs: [o]\n"
        "publish:\n  - {from: a/o, to: '{{ params.to }}/{{ item }}'}\n"
    ).workflow
    assert [p.to for p in wf.steps["a.0"].publish] == ["/base/res/u"]
    assert [p.to for p in wf.steps["a.1"].publish] == ["/base/res/v"]


@pytest.mark.parametrize(
    ("old", "new", "line", "phrase"),
    [
        ('"{{ params.to }}/', '"{{ params.tto }}/', 10, "'{{ params.tto }}' names no param (did you mean 'to'?)"),
        ('image: "busybox:{{ params.tag }}"', 'image: "busybox:{{ params.tga }}"', 6, "'{{ params.tga }}'"),
        ('"a/{{ params.name }}"', '"a/{{ params.nam }}"', 13, "'{{ params.nam }}'"),
        ('"{{ params.to }}/{{ params.sub }}"', '"{{ item }}"', 10, "only defined in a step with 'foreach'"),
        ("to: res,", "to: 'http://x',", 10, "publish target 'http://x/d' is not supported"),
        ('image: "busybox:{{ params.tag }}"', 'image: "{{ params.to }} x"', 6, "white space"),
    ],
    ids=["unknown-in-publish", "unknown-in-image", "unknown-in-inputs", "item-outside-fanout", "bad-url", "bad-image"],
)
def test_a_bad_template_in_any_field_is_refused_at_its_line(old: str, new: str, line: int, phrase: str) -> None:
    assert old in TEMPLATED
    errs = errors_of(TEMPLATED.replace(old, new))
    assert any(phrase in m and ln == line for ln, m in errs), errs


def test_an_empty_publish_target_once_filled_is_refused() -> None:
    with pytest.raises(SpecError, match="publish target is empty once filled in"):
        load(TEMPLATED.replace('"{{ params.to }}/{{ params.sub }}"', '"{{ params.to }}"'), to="")
