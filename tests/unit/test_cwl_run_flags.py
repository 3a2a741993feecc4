"""``hetflow run x.cwl`` refuses, by name, the run flags a CWL run does not take."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetflow.cli.run.cwlrun import refuse_for_cwl
from hetflow.errors import UsageError


def test_the_flags_given_are_named() -> None:
    with pytest.raises(UsageError, match=r"wf.cwl: --detach, --params-file do not apply to a CWL run"):
        refuse_for_cwl(Path("wf.cwl"), detach=True, params_file=Path("p.yml"), variant=[], prefer=None)


def test_none_given_passes() -> None:
    refuse_for_cwl(Path("wf.cwl"), detach=False, param=[], dry_run=False)
