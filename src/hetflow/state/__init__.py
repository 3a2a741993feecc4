"""The SQLite state store: the only module that writes SQL."""

from hetflow.state.models import AttemptRecord, RunRecord, StepRecord
from hetflow.state.store import Store

__all__ = ["AttemptRecord", "RunRecord", "StepRecord", "Store"]
