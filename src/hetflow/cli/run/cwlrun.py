"""``hetflow run x.cwl``: the cwl-runner (``hetflow.cwl``) with the run command's flags."""

from __future__ import annotations

from pathlib import Path

from hetflow.errors import UsageError


def refuse_for_cwl(file: Path, **given: object) -> None:
    """The ``hetflow run`` flags given (truthy) that a CWL file's run does not take, refused by name."""
    named = [f"--{name.replace('_', '-')}" for name, value in given.items() if value]
    if named:
        raise UsageError(
            f"{file}: {', '.join(named)} {'does' if len(named) == 1 else 'do'} not apply to a CWL run; "
            "it takes --backend, --config, --cluster, --no-cache and -q (docs/guides/cwl-clusters.md)"
        )


def run_cwl(
    file: Path,
    inputs: Path | None,
    quiet: bool,
    *,
    backend: str | None,
    config: Path | None,
    no_cache: bool,
    cluster: Path | None,
) -> int:
    """``hetflow run x.cwl inputs.yml``: the cwl-runner (``hetflow.cwl``), its outputs in the
    current directory as cwltool puts them, the output object on stdout; ``--backend``,
    ``--config``, ``--cluster`` and ``--no-cache`` as for a hetflow workflow."""
    from hetflow.cwl import main as cwl_main

    flags = [*(["--quiet"] if quiet else []), *(["--hetflow-no-cache"] if no_cache else [])]
    flags += [
        *(["--hetflow-backend", backend] if backend else []),
        *(["--hetflow-config", str(config)] if config else []),
        *(["--hetflow-cluster", str(cluster)] if cluster else []),
    ]
    return cwl_main([*flags, str(file), *([str(inputs)] if inputs is not None else [])])
