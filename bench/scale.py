"""Scale: N sampled personas (default 50,000, synthesised from the persona library) through the
stages that need no model, and a stated fraction of them through the model stages on the
zero-latency simulator, with peak RSS of each process. Target: under 1.5 GiB.

    .venv/bin/python bench/scale.py [--personas 50000] [--model-personas 600,1200]

Synthetic personas are library personas with new ids (profile item ids renamed to match) and a
rotated profile order, so every one is valid and distinct. The model stages run as real
`prb build` processes at two sizes; peak RSS at N is extrapolated linearly from those two points
(and said to be an extrapolation).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent


def synthesise(n: int, folder: Path) -> Path:
    from pipeline.personas import load_personas

    library = sorted(load_personas(["personas/library"]), key=lambda p: p.persona_id)
    folder.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {}
    for i in range(n):
        base = library[i % len(library)]
        pid = f"{base.persona_id}-s{i:06d}"
        k = (i // len(library)) % len(base.profile)
        profile = [
            {**item.model_dump(), "id": item.id.replace(base.persona_id, pid, 1)}
            for item in base.profile[k:] + base.profile[:k]
        ]
        record = {**base.model_dump(), "persona_id": pid, "profile": profile}
        lines.setdefault(base.category, []).append(json.dumps(record, ensure_ascii=False))
    for category, rows in lines.items():
        (folder / f"{category}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return folder


def no_model_stages(library: str, per_category: int, out: str) -> None:
    """Child process: the personas and questions stages as the flow runs them."""
    from pipeline.config import load_config
    from pipeline.flows import personas_task, questions_task

    cfg = load_config(
        None, outputs_dir=out, personas={"library": [library], "per_category": per_category}
    )
    run_dir = cfg.run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    sample = personas_task.fn(cfg, run_dir)
    t1 = time.monotonic()
    tasks = questions_task.fn(cfg, run_dir, sample)
    t2 = time.monotonic()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    print(
        json.dumps(
            {
                "personas": len(sample),
                "tasks": len(tasks),
                "personas_s": t1 - t0,
                "questions_s": t2 - t1,
                "peak_gib": peak,
            }
        )
    )


def child_peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024**2


def model_build(library: Path, per_category: int, url: str, folder: Path) -> dict:
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data.update(outputs_dir=str(folder / "outputs"), run_id="scale")
    data["model"].update(base_url=url, concurrency=64)
    data["personas"].update(library=[str(library)], per_category=per_category)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    t0 = time.monotonic()
    # a fresh process per size: RUSAGE_CHILDREN is the max over waited-for children, so sizes
    # are run smallest first and each figure is that build's own peak
    proc = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "build", "--config", str(folder / "config.yaml")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-3000:])
    stats = json.loads((folder / "outputs" / "scale" / "run_stats.json").read_text())
    return {
        "personas": 3 * per_category,
        "calls": sum(u["calls"] for u in stats["usage"].values()),
        "wall_s": time.monotonic() - t0,
        "peak_gib": child_peak_gib(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--personas", type=int, default=50_000)
    ap.add_argument("--model-personas", default="600,1200", help="two sizes for the model stages")
    ap.add_argument("--skip-no-model", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="prb-bench-scale-"))
    isolate(tmp)
    per_category = -(-args.personas // 3)
    library = synthesise(3 * per_category, tmp / "library")
    print(f"synthesised {3 * per_category} personas into {library}")

    if not args.skip_no_model:
        code = (
            "import sys; sys.path.insert(0, 'bench'); import scale; "
            f"scale.no_model_stages({str(library)!r}, {per_category}, {str(tmp / 'nomodel')!r})"
        )
        t0 = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True
        )
        if proc.returncode:
            raise SystemExit(proc.stderr[-3000:])
        r = json.loads(proc.stdout.strip().splitlines()[-1])
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
            r = model_build(library, -(-n // 3), url, tmp / f"model-{n}")
            points.append(r)
            print(
                f"model stages: {r['personas']} personas, {r['calls']} calls, "
                f"{r['wall_s']:.1f}s ({r['calls'] / r['wall_s']:.0f} calls/s); "
                f"peak RSS {r['peak_gib']:.3f} GiB"
            )
    (a, b) = points[0], points[-1]
    slope = (b["peak_gib"] - a["peak_gib"]) / max(1, b["personas"] - a["personas"])
    at_n = b["peak_gib"] + slope * (3 * per_category - b["personas"])
    secs = b["wall_s"] / b["personas"] * 3 * per_category
    print(
        f"extrapolated to {3 * per_category} personas through the model stages: peak RSS "
        f"~{at_n:.2f} GiB ({1024 * slope * 1000:.1f} MiB per 1,000 personas), "
        f"~{secs / 60:.0f} min at the measured rate (an extrapolation, not a measurement)"
    )


if __name__ == "__main__":
    main()
