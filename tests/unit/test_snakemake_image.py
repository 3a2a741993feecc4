"""The Snakemake image of TES tasks: its ``pip`` (the image has none) passes Snakemake's
plugin auto-deployment when the plugins are in the image and fails naming those that are not;
the Containerfile puts the pip-installed folder on PYTHONPATH and its bin first on PATH."""

from __future__ import annotations

import pytest
from demo.images.snakemake import SITE, snakemake_containerfile
from demo.images.snakemake_pip import main, wanted


def test_pip_install_passes_for_packages_in_the_image(capsys: pytest.CaptureFixture[str]) -> None:
    # what a Snakemake remote job runs first (spawn_jobs.precommand), with a package this Python has
    assert main(["install", "--target", ".snakemake/pip-deployments", "pyyaml"]) == 0
    assert "pyyaml" in capsys.readouterr().out


def test_pip_install_fails_naming_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["install", "--target", "x", "pyyaml", "snakemake-storage-plugin-nope>=1"]) == 1
    assert "not in this image: snakemake-storage-plugin-nope" in capsys.readouterr().err
    assert main(["download", "pyyaml"]) == 2


def test_requirement_names_skip_options_and_their_values() -> None:
    assert wanted(["-t", "dir", "--quiet", "a==1", "b[x]>=2", "--index-url", "http://i", "c"]) == ["a", "b", "c"]


def test_containerfile_puts_the_site_first() -> None:
    text = snakemake_containerfile("d1")
    assert f"COPY . {SITE}/" in text and f"PYTHONPATH={SITE} PATH={SITE}/bin:" in text and '"d1"' in text
