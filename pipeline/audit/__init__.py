"""What separates the pairs of a run or any release: `report` (prb audit), `judge_probes`
(persona-aware, persona-blind and counterfactual), `null` (the null test), `compare` (two
releases), `show` (one pair). The model-free probes they run are `pipeline.probes`."""
