"""The data path: what a run reads and what it leaves, on the host and in the store.

``inputs`` resolves a workflow's ``data`` once at submit (host files listed and hashed, S3
listed, then fetched into the run) into the ``DataManifest`` stored with the plan;
``paths`` lays out a run's work directory (staging, logs, scratch) and names containers;
``outputs`` accepts, hashes and checks a step's declared outputs, and ``fencing`` lets only
the attempt the executor accepts put them in place (its token, checked under the step's lock
at the rename, by the executor and by a Slurm job script alike); ``publishing/`` copies or
links a step's results out (host or S3), all or none, under one replace rule
(``publishing/rule``) and a lock per target folder, with a journal (``publishing/journal``) from
which resume and the doctor settle a publish a killed executor cut short; ``fanlist`` reads
a fan-out's list from a file or folder, bounded by the fan-out limit; and
``cache`` is the cross-run cache (a key from content, entries in the store, objects under
``HETFLOW_HOME/cache``) the runner consults before a launch and feeds after a success.
"""
