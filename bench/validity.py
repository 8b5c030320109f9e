"""Validity at scale: does only personal fit separate the pairs? Builds `configs/validity.yaml`
(≥ 500 released pairs) against the clean simulator and the artifact simulator (`--leaky`:
rejected answers hedged, shorter, in a register of their own), with the artifact gate off and
on, and prints for each build every probe (leakage, floors, judges) with its value, 95%
interval and n, the verdict, the pairs the gate dropped, and model calls and tokens per
released pair.

    .venv/bin/python bench/validity.py [--strategies a,b] [--baseline] [--design rewrite]

`--baseline` adds today's construction before this issue (the four instruction strategies, no
gate) on the clean simulator, the reference for calls per released pair. `--strategies` tries
another mix (how the default in configs/validity.yaml was chosen). Figures are from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent
TODAY = ["ignore_aspects", "wrong_expertise", "wrong_format", "wrong_tone"]


def build(
    folder: Path, url: str, gate: bool, strategies: list[str] | None, design: str = "plan"
) -> dict:
    from pipeline.run.flow import build as build_flow

    data = yaml.safe_load((REPO / "configs" / "validity.yaml").read_text())
    data["outputs_dir"] = str(folder / "outputs")
    data["model"]["base_url"] = url
    if os.environ.get("PRB_BENCH_PER_CATEGORY"):  # the smoke test's smallest size (CI)
        data["personas"]["per_category"] = int(os.environ["PRB_BENCH_PER_CATEGORY"])
    data.setdefault("filters", {})["artifact_gate"] = gate
    if strategies:
        data["generation"]["strategies"] = strategies
    if design == "rewrite":  # one base answer rewritten for each side's user (issue 46)
        data["generation"]["design"] = "rewrite"
        data["rubrics"] = {"source": "stated"}
        data["filters"]["judges"] = "qualified"  # the simulator's judge reads the plan's styles
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    t0 = time.perf_counter()
    result = asyncio.run(build_flow(str(folder / "config.yaml"), {}))
    result["seconds"] = time.perf_counter() - t0
    result["config"] = folder / "config.yaml"
    return result


def measure(result: dict) -> dict:
    from pipeline import probes
    from pipeline.audit.report import judge_probes
    from pipeline.config import load_config
    from pipeline.release.load import load_rows

    run_dir = Path(result["run_dir"])
    rows = load_rows(Path(result["release_dir"]))[0]
    cfg = load_config(str(result["config"]))
    found = probes.run_all(rows) + judge_probes(rows, (cfg, None))
    summary = probes.summary(found)
    usage = json.loads((run_dir / "run_stats.json").read_text())["usage"]
    calls = sum(u["calls"] for u in usage.values())
    tokens = sum(u["prompt_tokens"] + u["completion_tokens"] for u in usage.values())
    filters = [json.loads(x) for x in (run_dir / "filters.jsonl").read_text().splitlines()]
    gated = sum("artifact" in f["reasons"] for f in filters)
    funnel = json.loads((run_dir / "funnel.json").read_text())
    rewritten = sum(n for row in funnel for n in row.get("changed", {}).values())
    n = max(1, len(rows))
    return {
        "pairs": len(rows),
        "made": len(filters),
        "gate_dropped": gated,
        "rewritten": rewritten,
        "calls_per_pair": calls / n,
        "tokens_per_pair": tokens / n,
        "seconds": result["seconds"],
        "summary": summary,
    }


def show(name: str, m: dict) -> None:
    s = m["summary"]
    print(
        f"\n== {name}: {m['pairs']} released of {m['made']} pairs made; gate dropped "
        f"{m['gate_dropped']} ({m['gate_dropped'] / max(1, m['made']):.1%}), rewrote "
        f"{m['rewritten']} ({m['rewritten'] / max(1, m['made']):.1%}); "
        f"{m['calls_per_pair']:.2f} calls and {m['tokens_per_pair']:.0f} tokens per released "
        f"pair; built in {m['seconds']:.0f} s"
    )
    print(
        f"   verdict: {s['verdict']}  leaks: {s['leaks']}  easy: {s['easy_by']}  "
        f"judge flags: {s['judge_flags']}"
    )
    for fam in s["families"]:
        for p in fam["probes"]:
            v = "n/a" if p["value"] is None else f"{p['value']:.3f}"
            ci = "" if p["low"] is None else f"[{p['low']:.3f}, {p['high']:.3f}]"
            flag = fam["flag"].upper() if p["leak"] else ""
            print(f"   {fam['family']:8} {p['name']:42} {v:>6} {ci:16} n={p['n']:<5} {flag}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategies", help="comma-separated rejected strategies to try")
    ap.add_argument("--baseline", action="store_true", help="add today's construction")
    ap.add_argument("--out", type=Path, help="keep the builds here (default: a temp folder)")
    ap.add_argument(
        "--design",
        choices=("plan", "rewrite"),
        default="plan",
        help="generation.design: rewrite writes both answers from one base answer",
    )
    ap.add_argument(
        "--leaky-rate",
        type=float,
        default=0.2,
        help="the artifact simulator's share of careless rejected answers",
    )
    args = ap.parse_args()
    strategies = args.strategies.split(",") if args.strategies else None
    tmp = args.out or Path(tempfile.mkdtemp(prefix="prb-validity-"))
    isolate(tmp)
    sys.path.insert(0, str(REPO))
    from pipeline.sim.server import running

    artifact = {"leaky": True, "leaky_rate": args.leaky_rate}
    plan = [("clean simulator", {}, strategies), ("artifact simulator", artifact, strategies)]
    if args.baseline:
        plan.insert(0, ("today: 4 instruction strategies, clean simulator", {}, TODAY))
    found = {}
    with prefect_server():
        for sim, options, mix in plan:
            for gate in (False, True) if mix != TODAY else (False,):
                name = f"{sim}, gate {'on' if gate else 'off'}"
                with running(**options) as url:
                    folder = tmp / "".join(c if c.isalnum() else "_" for c in name)
                    found[name] = measure(build(folder, url, gate, mix, args.design))
                show(name, found[name])
    (tmp / "validity.json").write_text(json.dumps(found, indent=2, default=str))
    print(f"\nfigures: {tmp / 'validity.json'}")


if __name__ == "__main__":
    main()
