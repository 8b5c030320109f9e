"""One real-model build, the same recipe, on today's one-at-a-time server and on llama.cpp's
server with parallel slots: wall time, released pairs per hour, calls, and the share of prompt
tokens the server's prompt cache served.

    .venv/bin/python bench/local_build.py [--server PATH/llama-server] [--slots 0 1 4] \\
        [--config configs/real-fit.yaml] [--per-category 8]

Each build runs `prb demo --local` on a copy of the config with fewer users (every build from
an empty response cache); `--slots 0` is llama-cpp-python's server (one request at a time),
1 or more llama-server with as many slots and as many requests in flight. Figures are from
one run: compare the rows within it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from pipeline.llm import local

REPO = Path(__file__).resolve().parent.parent


def build(args: argparse.Namespace, slots: int, server: str, folder: Path) -> dict:
    data = yaml.safe_load(args.config.read_text())
    data["personas"]["per_category"] = args.per_category
    data["model"]["local"] = args.model or data["model"]["local"]
    data["outputs_dir"] = str(folder / "outputs")
    data["model"]["local_slots"] = max(slots, 1)
    data.get("filters", {}).pop("artifact_min_pairs", None)  # a small build has few pairs
    copy = folder / "config.yaml"
    copy.write_text(yaml.safe_dump(data))
    env = os.environ | {"PRB_LLAMA_SERVER": server if slots else "none"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "demo", "--local", "--config", str(copy)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode not in (0, 5):
        sys.exit(f"the build with {slots} slot(s) exited {done.returncode}: {done.stderr[-800:]}")
    run = folder / "outputs" / data["run_id"]
    manifest = run / "release" / "manifest.json"
    released = json.loads(manifest.read_text())["funnel"][-1]["count"] if manifest.exists() else 0
    cost = json.loads(manifest.read_text()).get("cost", {}) if manifest.exists() else {}
    stages = cost.get("stages", {})
    prompt = sum(s.get("prompt_tokens", 0) for s in stages.values())
    cached = sum(s.get("cached_prompt_tokens", 0) for s in stages.values())
    calls = sum(s.get("calls", 0) for s in stages.values())
    return {
        "wall": wall,
        "released": released,
        "calls": calls,
        "prompt": prompt,
        "cached": cached,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", help="llama.cpp's llama-server binary (default: the one prb finds)")
    ap.add_argument("--model", help="model.local for every build (default: the config's)")
    ap.add_argument("--slots", type=int, nargs="*", default=[0, 1, 4])
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "real-fit.yaml")
    ap.add_argument("--per-category", type=int, default=8)
    args = ap.parse_args()
    print(f"{args.config.name}, per_category {args.per_category}", flush=True)
    print(f"{'slots':>5} {'wall min':>8} {'released':>8} {'pairs/h':>8} {'calls':>6} {'cached':>7}")
    server = args.server or local.llama_server()
    if server is None and any(args.slots):
        print("llama-server is not built (`make llama-server`): llama-cpp-python's build only")
        args.slots = [0]
    for slots in args.slots:
        with tempfile.TemporaryDirectory(prefix="prb-local-build-") as tmp:
            got = build(args, slots, str(server), Path(tmp))
        share = got["cached"] / got["prompt"] if got["prompt"] else 0.0
        print(
            f"{slots:>5} {got['wall'] / 60:>8.1f} {got['released']:>8} "
            f"{got['released'] / (got['wall'] / 3600):>8.1f} {got['calls']:>6} {share:>7.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
