"""``python -m tools.docref [--check]``: see the package's docstring."""

from __future__ import annotations

import sys

from . import main

sys.exit(main(sys.argv[1:]))
