"""The image Snakemake's TES tasks run in (``snakemake-executor-plugin-tes`` runs Snakemake
itself inside each task's container): the Debian base with Snakemake and its S3 storage
plugin, pip-installed on the host into a cached folder that becomes the build context.

    snakemake:9.27.1  base:bookworm + /opt/snakemake (pip --target, PYTHONPATH)
                      + bin/python (python3) and bin/pip (the image has no pip: the jobs'
                      "pip install --target .snakemake/pip-deployments PLUGIN" checks that
                      the plugin is in the image, snakemake_pip.py)

Built once per machine: rebuilt only when the base, the pins or the Containerfile change
(its ``hetflow.examples.hash`` label); ``python -m demo.images --snakemake`` builds it."""

from __future__ import annotations

import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from demo.images.engine import Log, Podman, log_took, run_tool
from demo.images.examples import build_base_image
from demo.images.recipes import BASE_IMAGE, DEBIAN_PATH, HASH_LABEL
from hetflow.config import hetflow_home
from hetflow.errors import EngineError

SNAKEMAKE_VERSION = "9.27.1"
SNAKEMAKE_IMAGE = f"localhost/hetflow-examples/snakemake:{SNAKEMAKE_VERSION}"
# what the jobs import: Snakemake itself and the storage plugin of --default-storage-provider s3
SNAKEMAKE_PINS = (f"snakemake=={SNAKEMAKE_VERSION}", "snakemake-storage-plugin-s3==0.3.6")
SITE = "/opt/snakemake"
_PIP_SHIM = Path(__file__).with_name("snakemake_pip.py")
_PYTHON = (
    '#!/bin/sh\n# "python -m snakemake" is what the jobs run; Debian names it python3\nexec /usr/bin/python3 "$@"\n'
)


def snakemake_containerfile(digest: str) -> str:
    return (
        f"FROM {BASE_IMAGE}\n"
        f'LABEL {HASH_LABEL}="{digest}" hetflow.snakemake="{SNAKEMAKE_VERSION}"\n'
        f"COPY . {SITE}/\n"
        f"ENV PYTHONPATH={SITE} PATH={SITE}/bin:{DEBIAN_PATH}\n"
    )


def _site(cache: Path, log: Log) -> Path:
    """Snakemake and the plugin installed for the image's Python into a cached folder, once."""
    name = "snakemake-" + hashlib.sha256(" ".join(SNAKEMAKE_PINS).encode()).hexdigest()[:12]
    site, done = cache / name, cache / f"{name}.ok"
    if done.is_file() and site.is_dir():
        log(f"snakemake: reusing {site}")
        return site
    if sys.version_info[:2] != (3, 11):
        # some of Snakemake's dependencies are sources only (connection_pool): they are built
        # by this Python, which must be the image's (Debian 12: 3.11)
        raise EngineError(f"the Snakemake image needs a Python 3.11 to pip-install into it; this is {sys.version}")
    partial = site.with_name(site.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(site, ignore_errors=True)
    started = time.monotonic()
    log(f"snakemake: pip install {' '.join(SNAKEMAKE_PINS)} into {partial}")
    run_tool(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(partial),
         *SNAKEMAKE_PINS],
        what="installing Snakemake and its S3 storage plugin from PyPI",
        hint="Check that PyPI is reachable and pip works (`python3 -m pip --version`).",
        timeout=1800,
    )  # fmt: skip
    shutil.rmtree(partial / "bin", ignore_errors=True)  # console scripts for this host's interpreter
    partial.rename(site)
    done.write_text("\n".join(SNAKEMAKE_PINS) + "\n")
    log_took(log, f"snakemake: {site} ready", started)
    return site


def build_snakemake_image(*, force: bool = False, log: Log = print) -> str:
    """Build (or find up to date) ``SNAKEMAKE_IMAGE``; returns its name.  Raises EngineError
    when podman, debootstrap or PyPI fails."""
    build_base_image(log=log)
    podman = Podman.default()
    salt = podman.image_id(BASE_IMAGE) + snakemake_containerfile("") + _PIP_SHIM.read_text() + _PYTHON
    digest = hashlib.sha256((salt + "\n".join(SNAKEMAKE_PINS)).encode()).hexdigest()
    if not force and podman.label(SNAKEMAKE_IMAGE, HASH_LABEL) == digest:
        log(f"{SNAKEMAKE_IMAGE}: up to date")
        return SNAKEMAKE_IMAGE
    site = _site(hetflow_home() / "cache", log)
    bin_dir = site / "bin"
    bin_dir.mkdir(exist_ok=True)
    for script, text in (("pip", _PIP_SHIM.read_text()), ("python", _PYTHON)):
        (bin_dir / script).write_text(text)
        (bin_dir / script).chmod(0o755)
    old = podman.image_id(SNAKEMAKE_IMAGE)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hetflow-snakemake-") as tmp:
        containerfile = Path(tmp) / "Containerfile"
        containerfile.write_text(snakemake_containerfile(digest))
        podman.build(containerfile, site, SNAKEMAKE_IMAGE)
    log_took(log, f"{SNAKEMAKE_IMAGE}: built", started)
    locked = ("--rm", "--network=none", "--read-only", "--tmpfs=/tmp", "--user=1000:1000", "--cap-drop=all")
    check = "pip install --target /tmp/x snakemake-storage-plugin-s3 && python -m snakemake --version"
    out = podman.run(
        "run", *locked, "--env=HOME=/tmp", SNAKEMAKE_IMAGE, "sh", "-c", check, what=f"checking {SNAKEMAKE_IMAGE}"
    )
    log(f"{SNAKEMAKE_IMAGE}: check passed: {' '.join(out.split())}")
    if old:
        podman.drop(old)
    return SNAKEMAKE_IMAGE
