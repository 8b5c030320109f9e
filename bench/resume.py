"""Resume: a completed run repeated costs zero model calls and < 5% of the first run's wall time;
a run killed (SIGKILL) halfway and resumed makes only the calls not yet done.

    .venv/bin/python bench/resume.py [--per-category 32] [--latency-ms 100]

Every build is a real `prb build` process against the simulator, all reporting to one Prefect
server started here (so no run pays for a temporary server's start). Wall times are the flow's
own (`run_stats.json`) and the whole process's; calls are counted by the simulator and the run.
"""

from __future__ import annotations

import argparse
import json
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml
from _prefect import isolate, prefect_server  # bench/ is on sys.path when run as a script

REPO = Path(__file__).resolve().parent.parent


def sim_requests(url: str) -> int:
    return httpx.get(url.removesuffix("/v1") + "/stats").json().get("requests", 0)


def write_config(folder: Path, url: str, per_category: int) -> Path:
    data = yaml.safe_load((REPO / "configs" / "demo.yaml").read_text())
    data["outputs_dir"] = str(folder / "outputs")
    data["model"]["base_url"] = url
    data["personas"]["per_category"] = per_category
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(data))
    return folder / "config.yaml"


def start_build(config: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "pipeline.cli", "build", "--config", str(config)]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen, config: Path, started: float) -> dict:
    _, err = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"build failed ({proc.returncode}):\n{err.decode()[-3000:]}")
    stats = json.loads((config.parent / "outputs" / "demo" / "run_stats.json").read_text())
    return {
        "process_s": time.monotonic() - started,
        "flow_s": stats["wall_seconds"],
        "calls": sum(u["calls"] for u in stats["usage"].values()),
    }


def build(config: Path) -> dict:
    started = time.monotonic()
    return finish(start_build(config), config, started)


def cached(config: Path) -> int:
    db = sqlite3.connect(config.parent / "outputs" / "cache.sqlite")
    try:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
    finally:
        db.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-category", type=int, default=32)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="prb-bench-resume-"))
    isolate(tmp)
    from pipeline.sim.server import running

    with prefect_server(), running(latency_ms=args.latency_ms) as url:
        config = write_config(tmp / "full", url, args.per_category)
        first = build(config)
        unique = cached(config)  # distinct requests; concurrent duplicates are sent twice
        repeat = build(config)
        print(
            f"first run: {first['calls']} calls, flow {first['flow_s']:.1f}s, "
            f"process {first['process_s']:.1f}s"
        )
        flow_pct = 100 * repeat["flow_s"] / first["flow_s"]
        proc_pct = 100 * repeat["process_s"] / first["process_s"]
        print(
            f"repeat:    {repeat['calls']} calls, flow {repeat['flow_s']:.2f}s "
            f"({flow_pct:.1f}% of first), process {repeat['process_s']:.1f}s ({proc_pct:.1f}%)"
        )

        config = write_config(tmp / "killed", url, args.per_category)
        before = sim_requests(url)
        proc = start_build(config)
        while sim_requests(url) - before < first["calls"] // 2:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        sent = sim_requests(url) - before
        done = cached(config)
        resumed = build(config)
        print(
            f"killed at {sent} requests sent, {done} answers cached; resume made "
            f"{resumed['calls']} calls; cached + resumed = {done + resumed['calls']} "
            f"vs {unique} distinct requests ({first['calls']} sent) in an uninterrupted run "
            f"(in flight at the kill, sent again: {sent - done})"
        )
        print(
            f"figures: repeat_calls={repeat['calls']} "
            f"repeat_wall_ratio={repeat['flow_s'] / first['flow_s']:.3f} "
            f"resume_extra_calls={done + resumed['calls'] - unique}"
        )


if __name__ == "__main__":
    main()
