"""A literal ``foreach:`` list is linear in its length (issue 43): the loader's line table,
which points an item's errors at its step's lines, held every line of the list for every
item (9 million entries, 64 s to load, at 3,000 items).  Counted, not timed."""

from __future__ import annotations

from hetflow.spec import parse_workflow


def _wf(n: int) -> str:
    items = ", ".join(str(i) for i in range(n))
    return f"""apiVersion: hetflow/v1
name: fe
steps:
  a:
    image: localhost/x:1
    command: [sh, -c, "echo {{{{ item }}}}"]
    foreach: [{items}]
"""


def test_the_line_table_grows_linearly_with_a_literal_foreach_list() -> None:
    small, large = (len(parse_workflow(_wf(n)).lines) for n in (200, 400))
    assert large <= 2.2 * small, (small, large)


def test_an_items_error_still_points_at_its_steps_line() -> None:
    loaded = parse_workflow(_wf(3))
    assert loaded.lines[("steps", "a.2", "image")] == loaded.lines[("steps", "a", "image")] == 5
