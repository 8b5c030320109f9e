"""Running a build: `flow` (the Prefect flow), `rundir` (lock, preflight, fingerprint,
lifecycle), `shards` (Dask), `prefect_env` (prb's own Prefect server), `meter` (what each
stage spent)."""
