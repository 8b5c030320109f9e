"""Every benchmark script runs at its smallest size (issue 40): a refactor cannot break one
unseen. Each prints its figures; the figures themselves are for bench/README.md, measured on
full sizes, never asserted here. label_studio_roundtrip.sh needs the network (pip installs
Label Studio) and is left to run by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO, prefect_env
from public_releases import controlled

BENCH = REPO / "bench"
RELEASE = "{release}"  # a small release in the public schema, written per test
SMOKE = {  # script -> (arguments at the smallest size, what its output must show)
    "throughput.py": (["--calls", "40", "--concurrency", "8", "--latency-ms", "1"], "calls/s"),
    "ratelimit.py": (
        ["--calls", "30", "--rpm", "6000", "--tpm", "10000000", "--latency-ms", "1"],
        "429",
    ),
    "resume.py": (["--per-category", "2", "--latency-ms", "1"], "calls"),
    "judge_calls.py": (["--per-category", "2"], "judge_calls_per_released"),
    "scale.py": (["--personas", "30", "--model-personas", "15"], "calls/s"),
    "qualification.py": (["--answers", "2", "--no-local"], "prefers"),
    "null.py": ([RELEASE, "--copies", "2"], "0.5"),
    "null_judge.py": ([RELEASE, "--copies", "2"], "persona"),
    "validity.py": ([], "classifier"),
    "floor.py": ([], "degenerate"),
    "real_model.py": (["--model", "smollm2-135m", "--tasks", "1", "--only", "planner"], "planner"),
    "local_threads.py": (["--model", "smollm2-135m", "--threads", "1/1"], "gen tok/s"),
    "local_parallel.py": (
        ["--model", "smollm2-135m", "--requests", "1", "--parallel", "2", "--threads", "1"],
        "gen tok/s",
    ),
    "local_build.py": (
        ["--model", "smollm2-135m", "--per-category", "1", "--slots", "0"],
        "pairs/h",
    ),
    "eval_gpu.py": (["--pairs", "4", "--words", "20"], "pairs"),
    "rl_step.py": (["--steps", "1", "--batch", "2", "--generations", "2", "--tokens", "8"], "step"),
    "prompt_cache.py": ([], "cached"),
    "real_builds.py": (["demo-local"], "pairs released"),
    "generic_aspects.py": (["--recorded", "demo-local"], "generic"),
    "remote_build.py": (
        ["--simulator", "--config", "configs/real-planned.yaml", "--per-category", "2"],
        "pairs/h",
    ),
    "blind_read.py": (["items", RELEASE, "--out", "blind"], "items in"),
    "candidates.py": (
        ["--recorded", "demo-local", "--model", "smollm2-135m", "--tasks", "1", "--samples", "1"],
        "contrastive",
    ),
}


def test_every_bench_script_has_a_smoke_run():
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == set(SMOKE), scripts ^ set(SMOKE)


@pytest.mark.parametrize("script", sorted(SMOKE))
def test_the_bench_script_runs_at_its_smallest_size(script, tmp_path):
    args, shows = SMOKE[script]
    release = tmp_path / "release.jsonl"
    release.write_text("\n".join(json.dumps(r) for r in controlled()))
    args = [str(release) if a == RELEASE else a for a in args]
    env = prefect_env(PRB_BENCH_PER_CATEGORY="3", PYTHONPATH=str(REPO))
    env.pop("PREFECT_API_URL", None)  # each bench starts its own Prefect server
    done = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    assert shows in out, out[-3000:]
    assert "Traceback" not in out


def test_the_vllm_recipe_is_real_fit_on_a_server():
    """configs/vllm.yaml (issue 47 item 5) builds what configs/real-fit.yaml builds, only
    written by a served model: the same personas, rubrics, generation, filters and judge."""
    import yaml

    from pipeline.config import load_config

    gpu, cpu = (
        yaml.safe_load((REPO / "configs" / n).read_text()) for n in ("vllm.yaml", "real-fit.yaml")
    )
    for section in ("personas", "rubrics", "generation", "filters", "qualification", "seed"):
        assert gpu[section] == cpu[section], section
    cfg = load_config(str(REPO / "configs" / "vllm.yaml"))
    assert cfg.model.structured_output == "json_schema" and cfg.model.concurrency > 1
