"""The SQLite state store (the only module that writes SQL), the records it returns, the
states a run and a step may take, and the run's typed event stream.

    models   frozen records (RunRecord, StepRecord, ...) and states with their transitions
    store    Store: runs, steps, attempts, outputs, events, GPU leases, stored plans
    rows/    the SQL Store mixes in, one table family each:
      schema     the tables a new store is created with, and the schema versions
      leases     GPU lease rows (whole GPUs, shares, MIG instances)
      attempts   attempts, their outputs and the measured history
      data       fan-out expansions, cross-run cache entries, file hashes
      inputs     each attempt's data inputs as launched, each result's
      published  what was published where;  slowdowns: measured GPU-sharing slowdowns
      pages      the paged reads a dashboard makes (``Store(read_only=True)``)
    guards/  what keeps the store sound:
      busy       the retry that waits out a store another process holds locked
      integrity  quick_check on open, the store's marker (state.db.id), full disks
      private    state.db (and its -wal, -shm) made 0600: it holds env: values and params
      liveness   is a running run's executor still there (pid and its start time)
    events   RunEvent values, ``record`` (write), ``follow``/``tail``/``RunWatch`` (read)
    parsecache big workflows kept parsed under HETFLOW_HOME/cache/specs (``load_workflow_cached``)
"""

from hetflow.state.events import (
    AttemptFinished,
    AttemptStarted,
    Note,
    RunEvent,
    RunStateChanged,
    RunWatch,
    StepStateChanged,
    follow,
    record,
    tail,
    typed,
)
from hetflow.state.guards.integrity import (
    NEW_STORE_ENV,
    StoreDamaged,
    StoreFull,
    disk_full_message,
    disk_room,
    free_bytes,
    is_full,
    megabytes,
    mount_point,
)
from hetflow.state.guards.liveness import executor_gone, pid_alive, process_start
from hetflow.state.models import (
    FAILED,
    LAUNCHING,
    PENDING,
    QUEUED,
    QUEUED_PREFIX,
    RUN_FAILED,
    RUN_PENDING,
    RUN_RUNNING,
    RUN_STOPPED,
    RUN_SUCCEEDED,
    RUN_TERMINAL,
    RUNNING,
    SKIPPED,
    STEP_TERMINAL,
    STEP_TRANSITIONS,
    STOPPED,
    SUCCEEDED,
    USAGE_FIELDS,
    WAITING,
    AttemptRecord,
    CachedResult,
    CacheEntry,
    Event,
    Lease,
    OutputRecord,
    ParamRecord,
    PublishRecord,
    RunRecord,
    RunView,
    SlowdownSample,
    StepRecord,
    UsageRow,
)
from hetflow.state.parsecache import NO_PARSE_CACHE_ENV, PARSE_CACHE_MIN_BYTES, load_workflow_cached
from hetflow.state.rows.inputs import DATA_CHANGED, InputsSeen
from hetflow.state.rows.schema import SCHEMA_VERSION
from hetflow.state.rows.tes import TesTaskRow
from hetflow.state.store import Store

__all__ = [
    "DATA_CHANGED",
    "FAILED",
    "LAUNCHING",
    "NEW_STORE_ENV",
    "NO_PARSE_CACHE_ENV",
    "PARSE_CACHE_MIN_BYTES",
    "PENDING",
    "QUEUED",
    "QUEUED_PREFIX",
    "RUNNING",
    "RUN_FAILED",
    "RUN_PENDING",
    "RUN_RUNNING",
    "RUN_STOPPED",
    "RUN_SUCCEEDED",
    "RUN_TERMINAL",
    "SCHEMA_VERSION",
    "SKIPPED",
    "STEP_TERMINAL",
    "STEP_TRANSITIONS",
    "STOPPED",
    "SUCCEEDED",
    "USAGE_FIELDS",
    "WAITING",
    "AttemptFinished",
    "AttemptRecord",
    "AttemptStarted",
    "CacheEntry",
    "CachedResult",
    "Event",
    "InputsSeen",
    "Lease",
    "Note",
    "OutputRecord",
    "ParamRecord",
    "PublishRecord",
    "RunEvent",
    "RunRecord",
    "RunStateChanged",
    "RunView",
    "RunWatch",
    "SlowdownSample",
    "StepRecord",
    "StepStateChanged",
    "Store",
    "StoreDamaged",
    "StoreFull",
    "TesTaskRow",
    "UsageRow",
    "disk_full_message",
    "disk_room",
    "executor_gone",
    "follow",
    "free_bytes",
    "is_full",
    "load_workflow_cached",
    "megabytes",
    "mount_point",
    "pid_alive",
    "process_start",
    "record",
    "tail",
    "typed",
]
