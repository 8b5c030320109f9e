"""Seconds per RL step: GRPO (TRL) on the tiny policy, on CPU, against `prb reward-server`.

    .venv/bin/python bench/rl_step.py [--steps 10] [--batch 8] [--generations 4] [--tokens 64]

The prompts are the bundled LaMP-QA-format users' (personas/lamp-qa); the policy is
`pipeline/rl/tiny.py`'s (a 2-layer, 32-wide Llama with a word-level vocabulary of the fixture's
text). Each reward model trains its own copy for `--steps` steps; the figure is the mean of the
steps after the first (the first includes warm-up), measured by a callback at each step's end,
so it covers generation, the reward server's HTTP round trip and the optimiser. `length` needs
no model; `judge` asks the simulator (pointwise 1-10 judge) over real HTTP.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from pipeline.config import load_config
from pipeline.rl.server import Background
from pipeline.rl.tiny import build_tiny_policy
from pipeline.rl.train import train
from pipeline.sim.server import running

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    rows = [
        r
        for f in sorted((REPO / "personas" / "lamp-qa").glob("*_test.json"))
        for r in json.loads(f.read_text())
    ]
    texts = [r["question"] for r in rows] + [p["text"] for r in rows for p in r["profile"]]
    with tempfile.TemporaryDirectory() as tmp, running() as base_url:
        policy = build_tiny_policy(Path(tmp) / "policy", texts)
        rl = {
            "steps": a.steps,
            "batch_size": a.batch,
            "num_generations": a.generations,
            "max_new_tokens": a.tokens,
        }
        cfg = load_config(
            REPO / "configs" / "demo.yaml", outputs_dir=tmp, model__base_url=base_url, rl=rl
        )
        figures = {}
        for spec in ("length", "judge"):
            with Background(spec, cfg) as url:
                _, stats = train(policy, url, rows, cfg.rl, Path(tmp) / spec)
            figures[spec] = stats
            print(
                f"{spec:7s} {stats['steps']} steps: {stats['seconds_per_step']:.3f} s/step "
                f"(first step {stats['first_step_seconds']:.3f} s), reward "
                f"{stats['reward_first']:.2f} -> {stats['reward_last']:.2f}"
            )
        ratio = figures["judge"]["seconds_per_step"] / figures["length"]["seconds_per_step"]
        print(
            f"judge/length step time: {ratio:.2f}x ({a.batch} completions of up to "
            f"{a.tokens} tokens a step, {a.generations} per prompt)"
        )


if __name__ == "__main__":
    main()
