"""Running a build: `flow` (the Prefect flow), `rundir` (lock, preflight, fingerprint,
lifecycle), `shards` (Dask), `prefect_env` (prb's own Prefect server), `command` (a build as a
command runs it), `stopping` (SIGTERM). What each stage spent: `pipeline.meter`."""
