"""Judge calls and tokens per released pair: what the filters stage pays for each pair it keeps.

    .venv/bin/python bench/judge_calls.py [--per-category 16] [--degrade-rate 0.3] [--set K=V]

Two real `prb build` processes against the simulator, each with an empty response cache: the demo
config (8 personas per category), and a degraded run (`--degrade-rate` of rejected answers made
unhelpful, more personas) where many pairs fail cheap checks. For each: the filters stage's calls
and tokens (from `run_stats.json`, every request sent) divided by the released pairs, and the
released pair ids' digest, so runs before and after a change can be shown to release the same
pairs. `--set filters.evaluate_all=true` passes a config override to both builds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import yaml
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent


def config(folder: Path, url: str, per_category: int, sets: list[str]) -> Path:
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["outputs_dir"] = str(folder / "outputs")
    data["model"]["base_url"] = url
    data["personas"]["per_category"] = per_category
    for item in sets:
        dotted, _, value = item.partition("=")
        *parents, leaf = dotted.split(".")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = yaml.safe_load(value)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    return folder / "config.yaml"


def measure(name: str, cfg: Path) -> dict:
    prb = str(Path(sys.executable).with_name("prb"))
    proc = subprocess.run([prb, "build", "--config", str(cfg)], capture_output=True, text=True)
    run_dir = cfg.parent / "outputs" / "demo"
    stats = json.loads((run_dir / "run_stats.json").read_text())["usage"]
    ids = sorted(
        r["id"]
        for f in (run_dir / "release").glob("*/*.parquet")
        for r in pq.read_table(f, columns=["id"]).to_pylist()
    )
    f = stats.get("filters", {})
    calls, tokens = f.get("calls", 0), f.get("prompt_tokens", 0) + f.get("completion_tokens", 0)
    released = max(1, len(ids))
    return {
        "run": name,
        "exit": proc.returncode,
        "released": len(ids),
        "judge_calls": calls,
        "judge_tokens": tokens,
        "judge_calls_per_released": round(calls / released, 2),
        "judge_tokens_per_released": round(tokens / released, 1),
        "released_ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()[:12],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--per-category", type=int, default=16, help="degraded run's personas")
    ap.add_argument("--degrade-rate", type=float, default=0.3)
    ap.add_argument("--set", action="append", default=[], help="config override, K=V")
    args = ap.parse_args()
    from pipeline.sim.server import running

    with tempfile.TemporaryDirectory(prefix="prb-judge-calls-") as tmp:
        isolate(Path(tmp))
        with prefect_server():
            rows = []
            with running() as url:
                rows.append(measure("demo", config(Path(tmp) / "demo", url, 8, args.set)))
            with running(degrade_rate=args.degrade_rate) as url:
                folder = Path(tmp) / "degraded"
                rows.append(measure("degraded", config(folder, url, args.per_category, args.set)))
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
