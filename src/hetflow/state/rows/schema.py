"""The state store's tables: what a new store is created with (``Store`` runs these).

A store an older hetflow wrote is upgraded in place by presence-keyed migrations (a table
created where missing, a column added where ``PRAGMA table_info`` lacks it): ``Store._migrate``
and the mixins' own ``_migrate_*`` methods.  What each version added:
"""

from __future__ import annotations

from hetflow.state.rows.leases import LEASES_TABLE

# 3 (later, still 3: a nullable column added where missing, see _migrate): runs.pid_start, the
#    executor's start time.
# 3: attempts record what they asked for and used (requested cpus and memory, peak memory,
#    CPU time, image digest, the container's own start and end); see _migrate.
# 2: runs keep their plan (run_plans) and events carry typed data (events.data); see _migrate.
# 4: GPU leases record how they hold a GPU (mode, share, MIG instance) and one GPU may have
#    several (time-slicing / MPS tenants, MIG instances): keyed (gpu_uuid, container); see
#    _migrate_leases.
SCHEMA_VERSION = 4  # see the history above; a table or column added where missing keeps it
# (still 4: indexes added where missing, ``Pages._migrate_indexes``) `ps` and `resolve_run_id`
# read runs newest first: without an index, every call sorted the whole table; `plan` and `run`
# read one workflow's past attempts (``history``, ``usage_history``): by name, not a scan; the
# profile reads each (step, variant, node)'s newest attempts backwards (``attempts_history``)
RUN_INDEXES = """
CREATE INDEX IF NOT EXISTS runs_created ON runs (created);
CREATE INDEX IF NOT EXISTS runs_state ON runs (state, created);
CREATE INDEX IF NOT EXISTS runs_name ON runs (name);
CREATE INDEX IF NOT EXISTS attempts_history ON attempts (step, variant, node, ended, run_id, attempt);
"""
SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, workflow_file TEXT NOT NULL, state TEXT NOT NULL,
  created REAL NOT NULL, started REAL, ended REAL, pid INTEGER, uid INTEGER NOT NULL,
  gid INTEGER NOT NULL, workdir TEXT NOT NULL, spec_json TEXT NOT NULL,
  params_json TEXT NOT NULL, message TEXT NOT NULL DEFAULT '',
  backend TEXT NOT NULL DEFAULT 'local', backend_json TEXT NOT NULL DEFAULT '{}', pid_start INTEGER);
CREATE TABLE IF NOT EXISTS steps (
  run_id TEXT NOT NULL REFERENCES runs(id), step TEXT NOT NULL, ord INTEGER NOT NULL,
  state TEXT NOT NULL, variant TEXT, node TEXT, gpus TEXT NOT NULL DEFAULT '[]',
  attempts INTEGER NOT NULL DEFAULT 0, exit_code INTEGER, started REAL, ended REAL,
  reason TEXT NOT NULL DEFAULT '', not_before REAL, PRIMARY KEY (run_id, step));
CREATE TABLE IF NOT EXISTS attempts (
  run_id TEXT NOT NULL, step TEXT NOT NULL, attempt INTEGER NOT NULL, variant TEXT NOT NULL,
  node TEXT NOT NULL, gpus TEXT NOT NULL, gpu_uuids TEXT NOT NULL, container TEXT NOT NULL,
  image TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER, started REAL, ended REAL,
  message TEXT NOT NULL DEFAULT '', cpus REAL, memory INTEGER, peak_memory INTEGER,
  cpu_seconds REAL, image_id TEXT, run_started REAL, run_ended REAL, workflow_version INTEGER,
  gpu_util_mean REAL, gpu_util_max REAL, gpu_memory_peak INTEGER, gpu_memory_of TEXT,
  PRIMARY KEY (run_id, step, attempt));
CREATE TABLE IF NOT EXISTS outputs (
  run_id TEXT NOT NULL, step TEXT NOT NULL, name TEXT NOT NULL, sha256 TEXT NOT NULL,
  size INTEGER NOT NULL, path TEXT NOT NULL, PRIMARY KEY (run_id, step, name));
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, step TEXT, time REAL NOT NULL,
  kind TEXT NOT NULL, message TEXT NOT NULL, data TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS events_run ON events (run_id, id);
"""
    + RUN_INDEXES
    + """
CREATE TABLE IF NOT EXISTS run_plans (run_id TEXT PRIMARY KEY REFERENCES runs(id), plan_json TEXT NOT NULL);
"""
    + LEASES_TABLE
    + ";\n"
)
# 3: fan-outs expanded at submit or run time (run_expansions), remembered file hashes
# (file_hashes), the cross-run cache's entries (cache_entries)
SCHEMA_DATA = """
CREATE TABLE IF NOT EXISTS run_expansions (
  run_id TEXT NOT NULL, seq INTEGER NOT NULL, step TEXT NOT NULL, items_json TEXT NOT NULL,
  PRIMARY KEY (run_id, seq));
CREATE TABLE IF NOT EXISTS file_hashes (key TEXT PRIMARY KEY, sha256 TEXT NOT NULL, seen REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cache_entries (
  key TEXT PRIMARY KEY, workflow TEXT NOT NULL, step TEXT NOT NULL, run_id TEXT NOT NULL,
  created REAL NOT NULL, used REAL NOT NULL, size INTEGER NOT NULL, key_json TEXT NOT NULL,
  outputs_json TEXT NOT NULL);
"""
