#!/usr/bin/python3
"""``pip`` in hetflow's Snakemake image, which has no pip and no index to reach: Snakemake's
remote jobs begin with ``pip install --target .snakemake/pip-deployments PLUGIN...`` (its
auto-deployment of storage plugins); every package they name is in the image already, so
this succeeds when each is installed and fails naming the ones that are not."""

import re
import sys
from importlib.metadata import PackageNotFoundError, version

VALUED = {"--target", "-t", "--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--prefix", "--root"}


def wanted(args: list[str]) -> list[str]:
    names, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in VALUED:
            skip = True
        elif not arg.startswith("-"):
            names.append(re.split(r"[\[<>=!~;@ ]", arg, maxsplit=1)[0])
    return names


def main(argv: list[str]) -> int:
    if argv[:1] != ["install"]:
        print(f"pip {' '.join(argv)}: this image has no pip (only 'pip install' of packages it holds)", file=sys.stderr)
        return 2
    missing = []
    for name in wanted(argv[1:]):
        try:
            print(f"{name} {version(name)}: in the image")
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        print(
            f"not in this image: {', '.join(missing)}; it has no pip to install them (rebuild it with them)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
