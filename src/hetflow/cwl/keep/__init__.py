"""What a CWL invocation keeps in hetflow's store: the run and its steps (record), the
cross-run cache of finished jobs (cache), the store's own thread (storethread)."""
