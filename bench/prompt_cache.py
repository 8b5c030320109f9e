"""Prompt caching on the demo: tokens and cost per released pair when the provider caches prompt
prefixes, as OpenAI's automatic prompt caching does.

    .venv/bin/python bench/prompt_cache.py

Real `prb build` processes of the demo config against the simulator, each with an empty response
cache and a fresh simulator whose prompt cache follows one rule: OpenAI's (a prefix of at least
1,024 tokens, matched in blocks of 128) and a short-prefix rule (64 and 64, as providers that
cache from a few dozen tokens). The config gains a price table for the simulator's model at
gpt-4o-mini's list prices (USD per 1M: input 0.15, cached input 0.075, output 0.60). Each row:
tokens per released pair, the share of prompt tokens served from the cache, cost per released
pair, from the release manifest's cost block. Run it before and after a prompt change.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent
PRICE = {"input_per_1m": 0.15, "cached_input_per_1m": 0.075, "output_per_1m": 0.60}
RULES = {
    "openai (>=1024, blocks of 128)": (1024, 128),
    "short prefix (>=64, blocks of 64)": (64, 64),
    "no prompt cache": (0, 128),
}


def config(folder: Path, url: str) -> Path:
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["outputs_dir"] = str(folder / "outputs")
    data["model"]["base_url"] = url
    data["cost"] = {"prices": {data["model"]["generator"]: PRICE}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    return folder / "config.yaml"


def measure(cfg: Path) -> dict:
    prb = str(Path(sys.executable).with_name("prb"))
    proc = subprocess.run([prb, "build", "--config", str(cfg)], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(proc.stderr[-2000:])
    release = cfg.parent / "outputs" / "demo" / "release"
    manifest = json.loads((release / "manifest.json").read_text())
    block = manifest["cost"]
    prompt = sum(s["prompt_tokens"] for s in block["stages"].values())
    return {
        "released": block["released_pairs"],
        "tokens_per_pair": block["tokens_per_released_pair"],
        "cached_share": block.get("cached_prompt_tokens", 0) / prompt if prompt else 0.0,
        "cost_per_pair": block["cost_per_released_pair"],
    }


def main() -> None:
    from pipeline.sim.server import running

    with tempfile.TemporaryDirectory(prefix="prb-prompt-cache-") as tmp:
        isolate(Path(tmp))
        with prefect_server():
            print(
                f"{'provider cache rule':36} {'pairs':>5} {'tokens/pair':>11} {'cached':>7} "
                f"{'USD/pair':>10}"
            )
            for i, (name, (least, block)) in enumerate(RULES.items()):
                with running(cache_min_tokens=least, cache_block=block) as url:
                    r = measure(config(Path(tmp) / str(i), url))
                print(
                    f"{name:36} {r['released']:5d} {r['tokens_per_pair']:11.1f} "
                    f"{r['cached_share']:7.1%} {r['cost_per_pair']:10.6f}"
                )


if __name__ == "__main__":
    main()
