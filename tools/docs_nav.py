"""An mkdocs hook: every page under docs/guides/ is in the site's nav.

Plain mkdocs takes a nav entry per page; engineers add guides of their own, so the pages under
guides/ that mkdocs.yml's nav does not name are appended to its "Guides" section, titled by
their first ``# `` heading, in file-name order."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _listed(nav: Any) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*(_listed(n) for n in nav)) if nav else set()
    if isinstance(nav, dict):
        return set().union(*(_listed(v) for v in nav.values())) if nav else set()
    return set()


def _title(page: Path) -> str:
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem.replace("-", " ")


def on_config(config: Any) -> Any:
    nav = config["nav"]
    guides = next((entry["Guides"] for entry in nav or [] if isinstance(entry, dict) and "Guides" in entry), None)
    if guides is None:
        return config
    listed = _listed(nav)
    folder = Path(config["docs_dir"]) / "guides"
    for page in sorted(folder.glob("*.md")):
        name = f"guides/{page.name}"
        if name not in listed:
            guides.append({_title(page): name})
    return config
