"""The cache key: what changes it and what does not; the entry store's verification."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.execute import DataManifest, ResultCache, cache_key, input_digests
from hetflow.execute.data.inputs import DataFile, DataSetFiles
from hetflow.spec import Resources, Step
from hetflow.state import OutputRecord, Store

STEP = Step(image="img", command=("sh", "-c", "x"), outputs=("o.txt",), inputs={"a": "up/o.txt"})
VARIANT = STEP.resolved_variants()["default"]


def key(**change: object) -> str:
    args: dict[str, object] = {
        "workflow": "wf",
        "step_name": "s",
        "step": STEP,
        "variant_name": "default",
        "variant": VARIANT,
        "image_identity": "sha256:aaa",
        "inputs": {"a": "h1"},
    }
    args.update(change)
    return cache_key(**args).digest  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "change",
    [
        {"image_identity": "sha256:bbb"},
        {"variant_name": "cpu"},
        {"variant": VARIANT.model_copy(update={"command": ("sh", "-c", "x ")})},
        {"variant": VARIANT.model_copy(update={"env": {"K": "v"}})},
        {"step": STEP.model_copy(update={"outputs": ("o.txt", "p.txt")})},
        {"step": STEP.model_copy(update={"network": True})},
        {"inputs": {"a": "h2"}},
        {"inputs": {"a": "h1", "b": "h3"}},
        {"step_name": "t"},
        {"workflow": "other"},
    ],
    ids=["image", "variant", "argv", "env", "outputs", "network", "input", "new-input", "step", "workflow"],
)
def test_the_key_changes_with_what_decides_the_result(change: dict[str, object]) -> None:
    assert key(**change) != key()


@pytest.mark.parametrize(
    "change",
    [
        {"variant": VARIANT.model_copy(update={"resources": Resources(cpus=8, memory=2**34)})},
        {"variant": VARIANT.model_copy(update={"estimate": 99.0})},
        {"step": STEP.model_copy(update={"retries": 5})},
    ],
    ids=["resources", "estimate", "retries"],
)
def test_the_key_ignores_what_does_not(change: dict[str, object]) -> None:
    assert key(**change) == key()


def test_input_digests_of_outputs_files_inside_them_and_data(tmp_path: Path) -> None:
    (tmp_path / "up" / "dir").mkdir(parents=True)
    (tmp_path / "up" / "dir" / "f").write_text("x")
    records = [
        OutputRecord("r", "up", "o.txt", "sha-o", 1, str(tmp_path / "up/o.txt")),
        OutputRecord("r", "up", "dir", "sha-dir", 1, str(tmp_path / "up/dir")),
    ]
    data = DataManifest({"d": DataSetFiles("d", "dir", "/d", (DataFile("a.txt", "/d/a.txt", "sha-a", 1),))})
    step = Step(image="i", inputs={"o": "up/o.txt", "f": "up/dir/f", "d": "data.d", "one": "data.d/a.txt"})
    digests = input_digests(step, lambda parent: records, lambda parent: tmp_path / parent, data)
    assert digests is not None
    assert digests["o"] == "sha-o"
    assert len(digests["f"]) == 64 and digests["f"] != "sha-dir"
    assert digests["d"].startswith("data:") and digests["d"] == digests["one"]  # one file: same content
    missing = Step(image="i", inputs={"x": "up/nothere.txt"})
    assert input_digests(missing, lambda parent: records, lambda parent: tmp_path / parent, data) is None


def test_saved_results_come_back_verified_and_a_damaged_object_drops_the_entry(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    cache = ResultCache(store, tmp_path / "cache")
    out = tmp_path / "run1" / "out"
    out.mkdir(parents=True)
    (out / "o.txt").write_text("result\n")
    rec = OutputRecord("r1", "s", "o.txt", "h", 7, str(out / "o.txt"))
    k = cache_key(
        workflow="wf", step_name="s", step=STEP, variant_name="default", variant=VARIANT, image_identity="i", inputs={}
    )
    cache.save(k, workflow="wf", step="s", run_id="r1", records=[rec])
    entry = cache.lookup(k)
    assert entry is not None and entry.run_id == "r1"
    final = tmp_path / "run2" / "out"
    restored = cache.restore(entry, "r2", "s", final)
    assert restored is not None and (final / "o.txt").read_text() == "result\n"
    [obj] = [p for p in (tmp_path / "cache" / "objects").rglob("*") if p.is_file()]
    obj.unlink()
    assert cache.restore(entry, "r3", "s", tmp_path / "run3" / "out") is None
    assert cache.lookup(k) is None  # the entry went with its object


def test_prune_drops_old_entries_and_their_objects(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    cache = ResultCache(store, tmp_path / "cache")
    out = tmp_path / "out"
    out.mkdir()
    (out / "o.txt").write_text("abc")
    rec = OutputRecord("r1", "s", "o.txt", "h", 3, str(out / "o.txt"))
    k = cache_key(
        workflow="wf", step_name="s", step=STEP, variant_name="default", variant=VARIANT, image_identity="i", inputs={}
    )
    cache.save(k, workflow="wf", step="s", run_id="r1", records=[rec])
    assert cache.prune(older_than=0.0) == (0, 0)  # used after time 0: kept
    dropped, freed = cache.prune(older_than=None)
    assert (dropped, freed) == (1, 3) and cache.disk_usage() == 0


def test_a_key_given_again_is_the_key_of_its_own_document() -> None:
    """Keys are kept by their parts (a fan-out's items repeat a few): whatever order they are
    asked in, each key is the sha256 of its own document, with its own command."""
    import hashlib
    import json

    commands = [("sh", "-c", f"echo {i % 3}") for i in range(9)]
    for command in commands:
        got = cache_key(
            workflow="wf",
            step_name="s",
            step=STEP,
            variant_name="default",
            variant=VARIANT.model_copy(update={"command": command}),
            image_identity="sha256:aaa",
            inputs={"a": "h1"},
        )
        assert hashlib.sha256(got.text.encode()).hexdigest() == got.digest
        assert json.loads(got.text)["command"] == list(command)
    assert len({key(variant=VARIANT.model_copy(update={"command": c})) for c in commands}) == 3
