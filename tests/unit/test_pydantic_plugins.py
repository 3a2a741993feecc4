"""pydantic's plugin look-up, answered from the probe cache (issue 43: ``PydanticPluginTable``).

Each case runs a fresh interpreter that installs the finder as ``hetflow`` does, builds a
pydantic model and prints what pydantic's plugin table holds and whether the plugin (a
distribution with a ``pydantic`` entry point, made in a folder on ``sys.path``) was called.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CODE = """
import json, sys
from hetflow.probecache import PydanticPluginTable
PydanticPluginTable.install()
from pydantic import BaseModel

class M(BaseModel):
    x: int

M(x=1)
metadata = "importlib.metadata" in sys.modules
import pydantic.plugin._loader as loader
seen = sys.modules.get("fakeplugin")
table = None if loader._plugins is None else sorted(loader._plugins)
loader._plugins = None  # pydantic's own look-up, through what its loader imported
loader.get_plugins()
again = sorted(loader._plugins)
print(json.dumps({"table": table, "called": getattr(seen, "CALLED", []), "metadata": metadata, "again": again}))
"""

PLUGIN = """
CALLED = []

class Plugin:
    def new_schema_validator(self, schema, schema_type, schema_type_path, schema_kind, config, plugin_settings):
        CALLED.append(schema_type_path.name)
        return None, None, None

plugin = Plugin()
"""


def _run(site: Path, cache: Path, **env: str) -> dict[str, object]:
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", CODE],
        env={**os.environ, "PYTHONPATH": path, "XDG_CACHE_HOME": str(cache), **env},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _install_plugin(site: Path) -> None:
    (site / "fakeplugin.py").write_text(PLUGIN)
    info = site / "fakeplugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeplugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nfake = fakeplugin:plugin\n")


def test_no_plugin_installed_fills_pydantics_table_from_the_cache(tmp_path: Path) -> None:
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    assert _run(site, cache) == {"table": [], "called": [], "metadata": True, "again": []}  # probed
    kept = json.loads((cache / "hetflow" / "pydantic-plugins.json").read_text())
    assert list(kept.values()) == [[]]
    # answered from the cache: importlib.metadata (10-20 ms) not imported until pydantic calls it
    assert _run(site, cache) == {"table": [], "called": [], "metadata": False, "again": []}


def test_a_plugin_installed_after_the_answer_was_kept_is_loaded(tmp_path: Path) -> None:
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    assert _run(site, cache)["table"] == []
    _install_plugin(site)  # a new .dist-info folder: the folder's stamp, so the key, changes
    got = _run(site, cache)
    assert got["table"] == ["fakeplugin:plugin"]
    assert got["called"] == ["M"]
    assert got["again"] == ["fakeplugin:plugin"]


def test_pydantics_own_look_up_goes_through_the_stand_in_to_the_real_module(tmp_path: Path) -> None:
    """The kept answer says none (here: edited so, the key kept): pydantic's table is filled
    without importlib.metadata; when pydantic looks up its plugins itself after all, the
    ``entry_points`` its loader imported imports the real module and finds the plugin."""
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    _install_plugin(site)
    assert _run(site, cache)["table"] == ["fakeplugin:plugin"]
    path = cache / "hetflow" / "pydantic-plugins.json"
    path.write_text(json.dumps({key: [] for key in json.loads(path.read_text())}))
    assert _run(site, cache) == {"table": [], "called": [], "metadata": False, "again": ["fakeplugin:plugin"]}


def test_without_the_probe_cache_pydantic_still_finds_its_plugins(tmp_path: Path) -> None:
    site, cache = tmp_path / "site", tmp_path / "cache"
    site.mkdir()
    _install_plugin(site)
    got = _run(site, cache, HETFLOW_PROBE_CACHE="0")
    assert (got["table"], got["called"], got["again"]) == (["fakeplugin:plugin"], ["M"], ["fakeplugin:plugin"])
    assert not (cache / "hetflow" / "pydantic-plugins.json").exists()
