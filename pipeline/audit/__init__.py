"""What separates the pairs of a run or any release: `report` (prb audit), `probes` (model-free
leakage probes), `judge_probes` (persona-blind and counterfactual), `compare` (two releases),
`show` (one pair)."""
