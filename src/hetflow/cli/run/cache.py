"""``hetflow cache ls|show|prune``: the cross-run cache in HETFLOW_HOME/cache."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from hetflow.cli.common import console, open_store, print_json
from hetflow.config import hetflow_home
from hetflow.errors import UsageError
from hetflow.spec import format_bytes, format_duration, parse_duration
from hetflow.state import CacheEntry

if TYPE_CHECKING:
    from hetflow.execute import ResultCache

cache_app = typer.Typer(help="The cross-run cache: results reused when their key is unchanged.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(cache_app, name="cache")


def _cache() -> ResultCache:
    from hetflow.execute import ResultCache

    return ResultCache(open_store(), hetflow_home() / "cache")


def _entry_json(e: CacheEntry) -> dict[str, object]:
    outputs = json.loads(e.outputs_json)
    return {
        "key": e.key,
        "workflow": e.workflow,
        "step": e.step,
        "run": e.run_id,
        "created": e.created,
        "used": e.used,
        "size": e.size,
        "outputs": [{"name": o["name"], "sha256": o["sha256"], "size": o["size"]} for o in outputs],
    }


@cache_app.command("ls")
def ls(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Entries, most recently used first, and the space the cache takes."""
    cache = _cache()
    entries = cache.store.cache_entries()
    usage = cache.disk_usage()
    if json_out:
        print_json({"root": str(cache.root), "bytes": usage, "entries": [_entry_json(e) for e in entries]})
        return
    table = Table("KEY", "WORKFLOW", "STEP", "SIZE", "CREATED", "LAST USED", "FROM RUN", box=None)
    now = time.time()
    for e in entries:
        table.add_row(
            e.key[:12],
            e.workflow,
            e.step,
            format_bytes(e.size),
            format_duration(now - e.created) + " ago",
            format_duration(now - e.used) + " ago",
            e.run_id,
        )
    console.print(table)
    console.print(f"{len(entries)} entries, {format_bytes(usage)} on disk in {cache.objects}", highlight=False)


@cache_app.command()
def show(
    key: str = typer.Argument(..., help="A key, or a unique prefix of one."),
    json_out: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """One entry: what its key was made of (why a step matched it) and its outputs."""
    entries = _cache().store.cache_entries(key)
    if not entries:
        raise UsageError(f"no cache entry with key {key!r}; 'hetflow cache ls' lists them")
    if len(entries) > 1:
        raise UsageError(f"key prefix {key!r} is ambiguous ({len(entries)} entries); give more characters")
    e = entries[0]
    data = {**_entry_json(e), "key_of": json.loads(e.key_json)}
    if json_out:
        print_json(data)
        return
    console.print_json(json.dumps(data))


@cache_app.command()
def prune(
    older_than: str | None = typer.Option(None, "--older-than", help="Drop entries unused for this long (7d, 12h)."),
    all_: bool = typer.Option(False, "--all", help="Drop every entry."),
) -> None:
    """Drop entries (and the files no entry needs any more)."""
    if (older_than is None) == (not all_):
        raise UsageError("give --older-than DURATION (e.g. 7d) or --all")
    cutoff = None
    if older_than is not None:
        try:
            cutoff = time.time() - parse_duration(older_than)
        except ValueError as exc:
            raise UsageError(f"--older-than {older_than!r}: {exc}") from None
    dropped, freed = _cache().prune(cutoff)
    console.print(f"dropped {dropped} entr{'y' if dropped == 1 else 'ies'}, freed {format_bytes(freed)}")
