"""The backend registry (``execute.backends.registry``, after snakemake's executor plugins):
each backend package declares one ``BackendPlugin``, the registry lists them, and the
settings file, ``make_backend`` and the command line read it, so the core names no backend."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from hetflow.errors import UsageError
from hetflow.execute.backends import registry
from hetflow.execute.backends.fake import PLUGIN as FAKE_PLUGIN
from hetflow.execute.backends.fake import FakeBackend
from hetflow.execute.backends.plugin import LEASES, PLAN, BackendPlugin
from hetflow.execute.settings import Settings, load_settings

SRC = Path(__file__).resolve().parents[2] / "src" / "hetflow"
PLUGINS = [*registry.backend_plugins(), FAKE_PLUGIN]


@pytest.mark.parametrize("plugin", PLUGINS, ids=[p.name for p in PLUGINS])
def test_a_plugin_declares_what_its_classes_do(plugin: BackendPlugin) -> None:
    """The capabilities a plugin declares (read without loading the backend) are the backend
    class's; its section's keys are its settings class's fields, its variables among them."""
    cls = registry.load(plugin.backend)
    assert cls.capabilities == plugin.capabilities if plugin is not FAKE_PLUGIN else FakeBackend().capabilities
    assert plugin.capabilities.name == plugin.name
    assert plugin.dispatch == (PLAN if plugin.capabilities.places_steps else LEASES)
    assert plugin.capabilities.leases_gpus_here == (plugin.dispatch == LEASES)
    keys = registry.section_keys(plugin)
    if plugin.settings is not None:
        assert keys == tuple(sorted(f.name for f in fields(registry.load(plugin.settings))))
    assert set(plugin.env.values()) <= set(keys), "a variable sets a key of the backend's section"
    assert all(var.startswith("HETFLOW_") for var in plugin.env)


def test_reading_the_registry_loads_no_engine_client() -> None:
    """Every command line reads the registry (``--backend``'s help): its plugins import
    neither Ray, the Kubernetes client, httpx nor pydantic."""
    code = (
        "import sys\n"
        "from hetflow.execute.backends import registry\n"
        "registry.backend_help(); [registry.section_keys.__name__ for p in registry.backend_plugins()]\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'kubernetes', 'httpx', 'pydantic')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_backend_is_refused_naming_the_registered_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as caught:
        load_settings(None, tmp_path, {"HETFLOW_BACKEND": "nomad"})
    assert str(caught.value) == (
        f"backend 'nomad' is not one of {', '.join(registry.names())} (--backend, HETFLOW_BACKEND, a profile or"
        f" {tmp_path / 'config.yaml'})"
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("slurm: {partition: gpu, partitoin: cpu}\n", ":1: the 'slurm' section has unknown key(s) partitoin;"),
        ("ray:\n  adress: auto\n", ":2: the 'ray' section has unknown key(s) adress;"),
        (
            "profiles:\n  k: {kubernetes: {namespace: ml, nmespace: x}}\n",
            ":2: profile 'k': the 'kubernetes' section has unknown key(s) nmespace;",
        ),
    ],
    ids=["slurm", "ray-line-2", "kubernetes-in-a-profile"],
)
def test_an_unknown_key_in_a_backends_section_names_the_section(tmp_path: Path, text: str, said: str) -> None:
    (tmp_path / "config.yaml").write_text(text)
    profiles = ["k"] if "profiles" in text else []
    with pytest.raises(UsageError) as caught:
        load_settings(None, tmp_path, {}, profiles=profiles)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'config.yaml'}{said}"), message
    assert "backend takes" in message


def test_a_run_stored_before_the_registry_reads_back_the_same(tmp_path: Path) -> None:
    """The settings stored with a run keep each backend's section at the top level, by name,
    as they were stored before the sections were the registry's."""
    stored = (
        '{"backend": "slurm", "cache": true, "cluster": "/c.yaml", "engine": "podman", "kubernetes": {}, "notify": [],'
        ' "prefer": null, "profiles": [], "ray": {}, "resources": {}, "slurm": {"partition": "gpu"}, "variants": {},'
        ' "workdir": "/shared"}'
    )
    settings = Settings.from_json(stored)
    assert settings.section("slurm") == {"partition": "gpu"} and settings.section("ray") == {}
    assert settings.to_json() == stored


@pytest.fixture
def fake_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(registry.MODULES, "fake", "hetflow.execute.backends.fake")
    yield


def test_a_registered_backend_needs_no_other_edit(fake_registered: None, tmp_path: Path) -> None:
    """Adding a plugin module to ``registry.MODULES`` is all it takes: the settings file
    accepts it, ``make_backend`` makes it, ``--backend``'s help lists it."""
    from hetflow.execute import make_backend

    settings = load_settings(None, tmp_path, {}, backend="fake")
    assert settings.leases_here
    assert isinstance(make_backend(settings), FakeBackend)
    assert "fake: an engine in memory, for tests" in registry.backend_help()


# The core reads backends through the registry: no backend's name in these modules (string
# values, identifiers, imports of a backend's package), outside the exceptions named below.
CORE = ["execute/run", "execute/submit", "execute/settings.py", "cli"]
ENGINES = ("slurm", "ray", "kubernetes")  # as a word in any string; "local" (a common word) only as a value
# (module, the def or assignment it is in) -> what may be said there (a part of the string)
ALLOWED = {
    # the Kubernetes exporter's command (export/kubernetes), a stage of its own, not the backend
    ("cli/planning/plan.py", "export_kubernetes_cmd"): "",
    # help text: the engines' own default grace, and a profile named after what it sets
    ("cli/run/runs.py", "GRACE_HELP"): "Slurm KillWait",
    ("cli/run/runs.py", "stop"): "Slurm: the cluster's KillWait",
    ("cli/run/runs.py", "run"): "--profile slurm,gpu",
    # this machine's container engine (podman or docker), which previews, validate and runs here use
    ("execute/submit/session.py", "<module>"): "hetflow.execute.backends.local.engines",
    ("execute/submit/preview.py", "<module>"): "hetflow.execute.backends.local.engines",
    ("execute/submit/checkrun.py", "<module>"): "hetflow.execute.backends.local.engines",
}


def allowed(path: str, where: str, what: str) -> bool:
    said = ALLOWED.get((path, where))
    return said is not None and said in what


def named_backends(path: Path) -> Iterator[tuple[str, int, str]]:
    """(the enclosing def or assignment, line, what) for each backend named in ``path``."""
    tree = ast.parse(path.read_text())
    docs = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }
    engine = re.compile(rf"\b({'|'.join(ENGINES)})\b", re.IGNORECASE)
    every = (*ENGINES, "local")

    def visit(node: ast.AST, where: str) -> Iterator[tuple[str, int, str]]:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            where = node.name
        elif isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and where == "<module>":
            where = node.targets[0].id
        what = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if engine.search(node.value) or node.value in every:
                what = node.value
        elif isinstance(node, ast.Name | ast.Attribute | ast.FunctionDef | ast.ClassDef):
            name = (
                node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else node.name
            )
            if set(name.lower().split("_")) & set(ENGINES):
                what = name
        elif isinstance(node, ast.ImportFrom) and re.search(rf"\.backends\.({'|'.join(every)})\b", node.module or ""):
            what = node.module
        if what is not None:
            yield where, getattr(node, "lineno", 0), what
        for child in ast.iter_child_nodes(node):
            yield from visit(child, where)

    yield from visit(tree, "<module>")


def core_files() -> list[Path]:
    return sorted(p for part in CORE for p in ([SRC / part] if part.endswith(".py") else (SRC / part).rglob("*.py")))


def test_the_core_names_no_backend() -> None:
    found = [
        f"{path.relative_to(SRC)}:{line}: {what!r} (in {where})"
        for path in core_files()
        for where, line, what in named_backends(path)
        if not allowed(str(path.relative_to(SRC)), where, what)
    ]
    assert not found, "name backends through execute.backends.registry:\n" + "\n".join(found)


def test_every_exception_to_the_rule_is_still_needed() -> None:
    used = {
        (str(p.relative_to(SRC)), where)
        for p in core_files()
        for where, _, what in named_backends(p)
        if allowed(str(p.relative_to(SRC)), where, what)
    }
    assert set(ALLOWED) <= used, f"stale: {sorted(set(ALLOWED) - used)}"


def test_the_scan_finds_a_backend_named_in_code(tmp_path: Path) -> None:
    """The scan itself can fail: each way of naming a backend is found."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Runs on Slurm (a docstring may say so)."""\n'
        "from hetflow.execute.backends.local.engines import make_engine\n"
        "def f(settings):\n"
        '    if settings.backend == "local":\n'
        "        return settings.section('ray')\n"
        "    return kubernetes_inventory(settings)\n"
    )
    assert [(line, what) for _, line, what in named_backends(sample)] == [
        (2, "hetflow.execute.backends.local.engines"),
        (4, "local"),
        (5, "ray"),
        (6, "kubernetes_inventory"),
    ]


def switches(root: Path) -> list[str]:
    """Where the run reads ``assigns_gpus`` or looks a backend's method up by name."""
    return [
        f"{p.relative_to(root)}:{n}"
        for p in sorted((root / "execute" / "run").rglob("*.py"))
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if "assigns_gpus" in line or re.search(r"getattr\([^)]*backend", line)
    ]


def test_the_run_asks_capabilities_what_they_mean() -> None:
    """``assigns_gpus`` once stood for "a cluster" at six sites; each now asks what it means
    (``places_steps``, ``leases_gpus_here``) and ``image_entrypoint`` is a method of every
    backend.  Only the engine view reads ``assigns_gpus``: the GPUs an engine says it picked."""
    assert switches(SRC) == ["execute/run/engineview.py:39", "execute/run/engineview.py:81"]
