"""What separates the pairs of a run or any release: `report` (prb audit), `null` (the null
test), `compare` (two releases), `show` (one pair). The probes they run, model-free and judge
alike, are `pipeline.probes`."""
