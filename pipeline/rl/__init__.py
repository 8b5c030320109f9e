"""RL against reward models: `prb reward-server` (any `--rm` spec over HTTP, for RL engines),
its client adapters for TRL and verl, and `prb eval rl` (GRPO with TRL on a small policy, graded
by the Best-of-N oracle, correlated with benchmark accuracy)."""
