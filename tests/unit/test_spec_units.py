"""Memory sizes and durations as users write them, and the DAG helpers."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hetflow.spec.fields.units import format_bytes, format_duration, parse_duration, parse_memory
from hetflow.spec.validate.dag import children, descendants, find_cycle, topo_order

KI, MI, GI, TI = 1024, 1024**2, 1024**3, 1024**4

MEMORY = [
    pytest.param(4096, 4096, id="int-bytes"),
    pytest.param(0, 0, id="zero"),
    pytest.param(1.9, 1, id="float-bytes-truncate"),
    pytest.param("4096", 4096, id="digits-string"),
    pytest.param("512Mi", 512 * MI, id="Mi"),
    pytest.param("1Gi", GI, id="Gi"),
    pytest.param("1.5Gi", 3 * GI // 2, id="fractional-Gi"),
    pytest.param("2Ti", 2 * TI, id="Ti"),
    pytest.param("64Ki", 64 * KI, id="Ki"),
    pytest.param("2G", 2 * 10**9, id="decimal-G"),
    pytest.param("100k", 100_000, id="decimal-k"),
    pytest.param("2GB", 2 * 10**9, id="trailing-B"),
    pytest.param("2GiB", 2 * GI, id="trailing-iB"),
    pytest.param("  1 Ki ", KI, id="spaces"),
    pytest.param("3gi", 3 * GI, id="lowercase-unit"),
    pytest.param("512m", 512 * MI, id="docker-lowercase-m-is-MiB"),
    pytest.param("2g", 2 * GI, id="docker-lowercase-g-is-GiB"),
    pytest.param("2M", 2 * 10**6, id="kubernetes-M-is-decimal"),
]


@pytest.mark.parametrize(("value", "expected"), MEMORY)
def test_parse_memory(value: object, expected: int) -> None:
    assert parse_memory(value) == expected


BAD_MEMORY = [
    pytest.param("2Gx", "'2Gx' is not a memory size; write e.g. 512Mi, 2Gi or 4096 (bytes)", id="unknown-suffix"),
    pytest.param("Gi", "'Gi' is not a memory size", id="no-number"),
    pytest.param("", "'' is not a memory size", id="empty"),
    pytest.param("-1Gi", "'-1Gi' is not a memory size", id="negative-string"),
    pytest.param("1.2.3G", "'1.2.3G' is not a memory size", id="two-dots"),
    pytest.param(-5, "memory must be a finite, non-negative size, got -5", id="negative-int"),
    pytest.param(True, "True is not a memory size; write e.g. 512Mi or 2Gi", id="bool"),
]


@pytest.mark.parametrize(("value", "message"), BAD_MEMORY)
def test_parse_memory_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_memory(value)

    assert message in str(info.value)


@given(st.integers(0, 10**6), st.sampled_from([("Ki", KI), ("Mi", MI), ("Gi", GI), ("M", 10**6), ("", 1)]))
def test_parse_memory_scales_whole_numbers_exactly(n: int, unit: tuple[str, int]) -> None:
    suffix, factor = unit
    assert parse_memory(f"{n}{suffix}") == n * factor


DURATION = [
    pytest.param(90, 90.0, id="int-seconds"),
    pytest.param(2.5, 2.5, id="float-seconds"),
    pytest.param("20s", 20.0, id="s"),
    pytest.param("4m", 240.0, id="m"),
    pytest.param("1h30m", 5400.0, id="h-and-m"),
    pytest.param("250ms", 0.25, id="ms-is-not-minutes"),
    pytest.param("1.5h", 5400.0, id="fractional-h"),
    pytest.param("1d", 86400.0, id="d"),
    pytest.param(" 2m 30s ", 150.0, id="spaces-between-parts"),
]


@pytest.mark.parametrize(("value", "expected"), DURATION)
def test_parse_duration(value: object, expected: float) -> None:
    assert parse_duration(value) == expected


BAD_DURATION = [
    pytest.param("10x", "'10x' is not a duration; write e.g. 20s, 4m or 1h30m", id="unknown-unit"),
    pytest.param("1h30", "'1h30' is not a duration", id="trailing-number"),
    pytest.param("5 minutes", "'5 minutes' is not a duration", id="words"),
    pytest.param("-5s", "'-5s' is not a duration", id="negative-string"),
    pytest.param("", "'' is not a duration", id="empty"),
    pytest.param(-1, "a duration must be finite and non-negative, got -1", id="negative-number"),
    pytest.param(False, "False is not a duration", id="bool"),
]


@pytest.mark.parametrize(("value", "message"), BAD_DURATION)
def test_parse_duration_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_duration(value)

    assert message in str(info.value)


@given(st.integers(0, 100), st.integers(0, 59), st.integers(0, 59))
def test_parse_duration_sums_its_parts(h: int, m: int, s: int) -> None:
    assert parse_duration(f"{h}h{m}m{s}s") == h * 3600 + m * 60 + s


FORMATS = [
    pytest.param(format_bytes, 512, "512 B", id="bytes"),
    pytest.param(format_bytes, 40960 * MI, "40.0 GiB", id="gib"),
    pytest.param(format_bytes, 3 * TI, "3.0 TiB", id="tib"),
    pytest.param(format_duration, 12.34, "12.3s", id="seconds"),
    pytest.param(format_duration, 125, "2m05s", id="minutes"),
    pytest.param(format_duration, 3 * 3600 + 7 * 60 + 9, "3h07m", id="hours"),
]


@pytest.mark.parametrize(("fmt", "value", "text"), FORMATS)
def test_formats(fmt: Callable[[float], str], value: float, text: str) -> None:
    assert fmt(value) == text


# --- DAG helpers: edges map a step to the steps it needs -------------------------------

CYCLES = [
    pytest.param({"a": [], "b": ["a"]}, None, id="chain"),
    pytest.param({"a": ["b"], "b": ["a"]}, ["a", "b", "a"], id="two"),
    pytest.param({"a": [], "b": ["c"], "c": ["d"], "d": ["b"]}, ["b", "c", "d", "b"], id="three-after-a-root"),
    pytest.param({"a": ["a"]}, ["a", "a"], id="self"),
    pytest.param({"a": ["ghost"]}, None, id="unknown-names-ignored"),
]


@pytest.mark.parametrize(("edges", "cycle"), CYCLES)
def test_find_cycle(edges: dict[str, list[str]], cycle: list[str] | None) -> None:
    assert find_cycle(edges) == cycle


DIAMOND = {"top": [], "left": ["top"], "right": ["top"], "bottom": ["right", "left"], "alone": []}


def test_topo_order_puts_needs_first_and_keeps_file_order_for_ties() -> None:
    assert topo_order({"bottom": ["right", "left"], "right": ["top"], "left": ["top"], "top": []}) == [
        "top",
        "right",
        "left",
        "bottom",
    ]
    assert topo_order(DIAMOND) == ["top", "left", "right", "bottom", "alone"]


def test_children_and_descendants() -> None:
    assert children(DIAMOND) == {
        "top": ["left", "right"],
        "left": ["bottom"],
        "right": ["bottom"],
        "bottom": [],
        "alone": [],
    }
    assert descendants(DIAMOND, "top") == {"left", "right", "bottom"}
    assert descendants(DIAMOND, "left") == {"bottom"}
    assert descendants(DIAMOND, "alone") == set()


@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=20))
def test_topo_order_respects_every_edge_of_an_acyclic_graph(pairs: list[tuple[int, int]]) -> None:
    # Only edges from a higher to a lower number: acyclic by construction.
    edges: dict[str, list[str]] = {f"s{i}": [] for i in range(8)}
    for a, b in pairs:
        if a > b:
            edges[f"s{a}"].append(f"s{b}")
    order = topo_order(edges)

    assert sorted(order) == sorted(edges)
    assert find_cycle(edges) is None
    assert all(order.index(dep) < order.index(n) for n, deps in edges.items() for dep in deps)
