"""Scale: N sampled personas (default 50,000, synthesised from the persona library) through the
stages that need no model, and through the model stages on the zero-latency simulator, with the
peak RSS of each process. Target: under 1.5 GiB.

    .venv/bin/python bench/scale.py [--personas 50000] [--model-personas 1500,50000]

Synthetic personas are library personas with new ids (profile item ids renamed to match) and a
rotated profile order, so every one is valid and distinct. The model stages run as real
`prb build` processes at the given sizes; when the largest is below N, peak RSS at N is
extrapolated linearly from the smallest and largest (and said to be one). Each figure is the
measured process's own VmHWM, read at its exit (`pipeline.meter.peak_rss_gib`).
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
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent


def synthesise(per_category: int, folder: Path) -> Path:
    from pipeline.personas.files import load_personas

    library = sorted(load_personas(["personas/library"]), key=lambda p: p.persona_id)
    folder.mkdir(parents=True, exist_ok=True)
    for category in sorted({p.category for p in library}):
        own = [p for p in library if p.category == category]
        rows = []
        for i in range(per_category):
            base = own[i % len(own)]
            pid = f"{base.persona_id}-s{i:06d}"
            k = (i // len(own)) % len(base.profile)
            profile = [
                {**item.model_dump(), "id": item.id.replace(base.persona_id, pid, 1)}
                for item in base.profile[k:] + base.profile[:k]
            ]
            record = {**base.model_dump(), "persona_id": pid, "profile": profile}
            rows.append(json.dumps(record, ensure_ascii=False))
        (folder / f"{category}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def no_model_stages(library: str, per_category: int, out: str) -> None:
    """Child process: the personas and questions stages as the flow runs them."""
    import asyncio

    from pipeline.config import load_config
    from pipeline.meter import peak_rss_gib
    from pipeline.stages import RunContext, stage

    cfg = load_config(
        None, outputs_dir=out, personas={"library": [library], "per_category": per_category}
    )
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx = RunContext(cfg, run_dir)
    t0 = time.monotonic()
    personas = asyncio.run(stage("personas").run(ctx, None))  # as the flow runs them
    n_personas = personas.kept
    t1 = time.monotonic()
    n_tasks = asyncio.run(stage("questions").run(ctx, personas.output)).kept
    t2 = time.monotonic()
    peak = peak_rss_gib()
    print(
        json.dumps(
            {
                "personas": n_personas,
                "tasks": n_tasks,
                "personas_s": t1 - t0,
                "questions_s": t2 - t1,
                "peak_gib": peak,
            }
        )
    )


# runs `python -m <module> <args>` and writes its VmHWM to PRB_BENCH_PEAK_FILE at exit
PEAK_WRAPPER = """
import atexit, os, runpy, sys
sys.path.insert(0, "bench")  # the no-model child runs this very script as `scale`
from pipeline.meter import peak_rss_gib
atexit.register(lambda: open(os.environ["PRB_BENCH_PEAK_FILE"], "w").write(repr(peak_rss_gib())))
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def run_measured(module: str, *args: str) -> tuple[str, float]:
    """`python -m module args` to the end; its stdout and its own peak RSS in GiB."""
    with tempfile.TemporaryDirectory() as tmp:
        peak_file = Path(tmp) / "peak"
        proc = subprocess.run(
            [sys.executable, "-c", PEAK_WRAPPER, module, *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "PRB_BENCH_PEAK_FILE": str(peak_file)},
        )
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        return proc.stdout, float(peak_file.read_text())


INSTRUCTED = ["ignore_aspects", "wrong_expertise", "wrong_format", "wrong_tone"]


def model_build(
    library: Path, per_category: int, url: str, folder: Path, instructed: bool = False
) -> dict:
    """A real build of the demo config on the default recipe (persona_swap: what users run at
    scale), or with the four instruction strategies (the artifact gate's rewrite path)."""
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data.update(outputs_dir=str(folder / "outputs"), run_id="scale")
    data["model"].update(base_url=url, concurrency=64)
    data["personas"].update(library=[str(library)], per_category=per_category)
    data["generation"]["strategies"] = INSTRUCTED if instructed else ["persona_swap"]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    t0 = time.monotonic()
    _, peak = run_measured("pipeline.cli", "build", "--config", str(folder / "config.yaml"))
    stats = json.loads((folder / "outputs" / "scale" / "run_stats.json").read_text())
    # the flow resets the peak at each stage (run_stats has each stage's): the build's is the max
    peak = max([peak, *(s["peak_rss_gib"] or 0 for s in stats["stages"].values())])
    return {
        "personas": 3 * per_category,
        "calls": sum(u["calls"] for u in stats["usage"].values()),
        "wall_s": time.monotonic() - t0,
        "peak_gib": peak,
        "stats": stats,
    }


def stage_table(stats: dict) -> list[str]:
    """run_stats.json as a table: each stage's wall time, calls/s and own peak RSS, then the
    gate, the floor and qualification on their own lines, and their share of the build."""
    from pipeline.checks import CHECKS
    from pipeline.stages import stages

    parts, wall = stats["parts"], stats["wall_seconds"]
    lines = [f"{'stage':<34}{'wall s':>9}{'calls':>9}{'calls/s':>9}{'peak GiB':>10}"]
    for stage in stages():
        spent = stats["stages"].get(stage.name)
        if spent is None:
            continue
        calls = stats["usage"].get(stage.name, {}).get("calls", 0)
        rate = f"{calls / spent['wall_s']:.0f}" if calls and spent["wall_s"] else ""
        peak = spent["peak_rss_gib"]
        lines.append(
            f"{stage.name:<34}{spent['wall_s']:>9.1f}{calls or '':>9}{rate:>9}"
            f"{'' if peak is None else f'{peak:.3f}':>10}"
        )
    names = sorted(c.name for c in CHECKS if c.floor)
    floor = {f"filters: {n}{part}" for n in names for part in ("", " (run-level)")}
    gate = sum(v for k, v in parts.items() if "artifact" in k)
    floor_s = sum(v for k, v in parts.items() if k in floor)
    for name, seconds in (
        ("  artifact gate (pairs' rewrite + filters)", gate),
        (f"  quality floor ({', '.join(names)})", floor_s),
        ("  judge qualification", parts.get("filters: qualification", 0.0)),
        ("  release probes (card figures)", parts.get("release: probes", 0.0)),
    ):
        lines.append(f"{name:<34}{seconds:>9.1f}")
    lines.append(
        f"{'gate + floor share of the build':<34}{(gate + floor_s) / wall:>9.1%}  (target <= 15%)"
    )
    lines += [f"  {k}: {v:.1f} s" for k, v in sorted(parts.items()) if v >= 0.5]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--personas", type=int, default=50_000)
    ap.add_argument("--model-personas", default="1500,50000", help="sizes for the model stages")
    ap.add_argument("--skip-no-model", action="store_true")
    ap.add_argument(
        "--instructed",
        action="store_true",
        help="the four instruction strategies, not the "
        "default recipe (persona_swap): the artifact gate's rewrite path",
    )
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="prb-bench-scale-"))
    isolate(tmp)
    per_category = -(-args.personas // 3)
    library = synthesise(per_category, tmp / "library")
    print(f"synthesised {3 * per_category} personas into {library}")

    if not args.skip_no_model:
        t0 = time.monotonic()
        out, _ = run_measured(
            "scale", "no-model", str(library), str(per_category), str(tmp / "nomodel")
        )
        r = json.loads(out.strip().splitlines()[-1])
        print(
            f"no-model stages: {r['personas']} personas, {r['tasks']} tasks; personas "
            f"{r['personas_s']:.1f}s, questions {r['questions_s']:.1f}s, total "
            f"{time.monotonic() - t0:.1f}s; peak RSS {r['peak_gib']:.2f} GiB (target < 1.5)"
        )

    from pipeline.sim.server import running

    with prefect_server(), running() as url:
        sizes = sorted(int(x) for x in args.model_personas.split(","))
        points = []
        for n in sizes:
            r = model_build(library, -(-n // 3), url, tmp / f"model-{n}", args.instructed)
            points.append(r)
            print(
                f"model stages: {r['personas']} personas, {r['calls']} calls, "
                f"{r['wall_s']:.1f}s ({r['calls'] / r['wall_s']:.0f} calls/s); "
                f"peak RSS {r['peak_gib']:.3f} GiB"
            )
            print("\n".join(stage_table(r["stats"])))
    n_all = 3 * per_category
    if points[-1]["personas"] >= n_all or len(points) < 2:
        return  # measured at N (or nothing to extrapolate from)
    (a, b) = points[0], points[-1]
    slope = (b["peak_gib"] - a["peak_gib"]) / max(1, b["personas"] - a["personas"])
    at_n = b["peak_gib"] + slope * (n_all - b["personas"])
    secs = b["wall_s"] / b["personas"] * n_all
    print(
        f"extrapolated to {n_all} personas through the model stages: peak RSS "
        f"~{at_n:.2f} GiB ({1024 * slope * 1000:.1f} MiB per 1,000 personas), "
        f"~{secs / 60:.0f} min at the measured rate (an extrapolation, not a measurement)"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["no-model"]:  # the child process of the no-model measurement
        no_model_stages(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main()
