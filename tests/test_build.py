"""The whole road: the demo flow end to end over real HTTP, real Prefect, real Parquet."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import datasets
import pytest
from conftest import build, write_config

from pipeline.llm.cache import ResponseCache

RELEASED = [
    "id",
    "question",
    "profile",
    "rubric_aspects",
    "narrative",
    "category",
    "chosen",
    "rejected",
]
CATEGORIES = ["Art_and_Entertainment", "Lifestyle_and_Personal_Development", "Society_and_Culture"]


def release_hashes(release: Path) -> dict[str, str]:
    return {
        str(p.relative_to(release)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(release.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory, sim_url):
    tmp = tmp_path_factory.mktemp("demo")
    config = write_config(tmp, sim_url)
    return config, build(config)


def test_demo_builds_a_release_with_every_stage(demo_run):
    config, result = demo_run
    run_dir = Path(result["run_dir"])
    for stage in ("personas", "questions", "rubrics", "pairs", "filters", "annotation"):
        assert (run_dir / f"{stage}.jsonl").stat().st_size > 0, stage
    funnel = result["funnel"]
    assert funnel["personas"] == 24
    assert funnel["questions"] == 24
    assert 0 < funnel["released"] <= funnel["filters_kept"] <= funnel["pairs"] <= 24
    release = Path(result["release_dir"])
    manifest = json.loads((release / "manifest.json").read_text())
    assert manifest["simulated"] is True
    assert set(manifest["prompts"]) >= {"planner", "chosen", "rejected", "judge_quality"}
    assert all(len(p["sha256"]) == 64 for p in manifest["prompts"].values())
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((release / name).read_bytes()).hexdigest() == digest
    assert "api_key" not in json.dumps(manifest)
    assert "simulated" in (release / "README.md").read_text()


def test_release_loads_with_datasets(demo_run):
    _, result = demo_run
    release = Path(result["release_dir"])
    files = sorted(str(p) for p in release.rglob("*.parquet"))
    assert len(files) == 3
    ds = datasets.load_dataset("parquet", data_files=files, split="train")
    assert ds.column_names[: len(RELEASED)] == RELEASED
    assert ds.num_rows == result["funnel"]["released"]
    whole = datasets.load_dataset(str(release), split="test")
    assert whole.num_rows == ds.num_rows
    for category in CATEGORIES:
        part = datasets.load_dataset(str(release), category, split="test")
        assert set(part["category"]) == {category}
        row = part[0]
        assert row["chosen"] != row["rejected"]
        assert {"id", "category", "text"} == set(row["profile"][0])
        assert {"aspect", "evidence", "reason"} == set(row["rubric_aspects"][0])


def test_rerun_makes_no_calls_and_same_bytes(demo_run):
    config, first = demo_run
    before = release_hashes(Path(first["release_dir"]))
    again = build(config)
    assert sum(u["calls"] for u in again["usage"].values()) == 0
    assert release_hashes(Path(again["release_dir"])) == before


def test_faulted_endpoint_gives_the_same_pairs(tmp_path, sim_url, sim_factory):
    clean = build(write_config(tmp_path / "clean", sim_url, personas={"per_category": 3}))
    flaky_url = sim_factory(
        rate_429=0.05, rate_500=0.05, rate_malformed=0.05, rate_slow=0.05, slow_s=5, seed=7
    )
    flaky_cfg = write_config(
        tmp_path / "flaky",
        flaky_url,
        personas={"per_category": 3},
        model={
            "timeout_s": 1.0,
            "max_retries": 12,
            "backoff_initial_s": 0.01,
            "backoff_max_s": 0.05,
        },
    )
    flaky = build(flaky_cfg)
    retries = sum(sum(u["retries"].values()) for u in flaky["usage"].values())
    assert retries > 0  # the faults really happened

    def pairs(result):
        lines = (Path(result["run_dir"]) / "pairs.jsonl").read_text().splitlines()
        return sorted(json.loads(line)["pair_id"] for line in lines)

    assert pairs(flaky) == pairs(clean)
    assert len(set(pairs(flaky))) == len(pairs(flaky)) == 9
    # same content too, manifest included: no faulted answer slipped into a record
    assert release_hashes(Path(flaky["release_dir"])) == release_hashes(Path(clean["release_dir"]))


def test_changed_prompt_invalidates_only_its_task(tmp_path, sim_url, monkeypatch):
    prompts = tmp_path / "prompts"
    shutil.copytree(Path(__file__).resolve().parent.parent / "prompts", prompts)
    monkeypatch.setattr("pipeline.llm.prompts.PROMPTS_DIR", prompts)
    import pipeline.llm.prompts as P

    monkeypatch.setattr(P.load_prompt, "__defaults__", (prompts,))
    monkeypatch.setattr(P.all_prompts, "__defaults__", (prompts,))
    config = write_config(tmp_path, sim_url, personas={"per_category": 2})
    build(config)
    path = prompts / "judge_quality.yaml"
    path.write_text(
        path.read_text().replace("You grade one answer", "You carefully grade one answer")
    )
    # a new run id over the same cache (a resumed run id would refuse a changed prompt)
    again = build(config, run_id="second")
    calls = {stage: u["calls"] for stage, u in again["usage"].items()}
    assert calls.get("rubrics", 0) == 0 and calls.get("pairs", 0) == 0
    # only the two quality-judge calls per pair are asked again
    assert calls["filters"] == 2 * 6
    cache = ResponseCache(Path(again["run_dir"]).parent / "cache.sqlite")
    assert cache.count("judge_quality") == 4 * 6


def test_prb_sim_server_serves_the_openai_api_with_its_options(tmp_path):
    import subprocess
    import sys
    import time

    import httpx

    from pipeline.serving import free_port

    port = free_port()
    prb = Path(sys.executable).parent / "prb"
    proc = subprocess.Popen([str(prb), "sim-server", "--port", str(port), "--rate-500", "1.0"])
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(150):
            try:
                models = httpx.get(f"{base}/v1/models", timeout=1).json()
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert [m["id"] for m in models["data"]] == ["prb-sim-1"]
        body = {"model": "prb-sim-1", "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(f"{base}/v1/chat/completions", json=body).status_code == 500
    finally:
        proc.terminate()
        proc.wait(10)


def test_prb_demo_moves_a_demo_from_another_version_aside_instead_of_failing(tmp_path):
    """`make demo` after an upgrade used to stop on the old demo's fingerprint."""
    import subprocess
    import sys

    from conftest import prefect_env

    config = write_config(tmp_path, "http://127.0.0.1:9/v1", personas={"per_category": 1})

    def demo(seed: int) -> subprocess.CompletedProcess:
        text = config.read_text().replace("seed: 13", f"seed: {seed}")
        config.write_text(text)
        return subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "demo", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=300,
            env=prefect_env(),
        )

    assert demo(13).returncode == 0
    again = demo(14)  # other settings: resuming would mix results
    assert again.returncode == 0, again.stderr
    assert "moving it aside" in again.stdout
    runs = sorted(p.name for p in (tmp_path / "outputs").iterdir() if p.is_dir())
    assert runs == ["demo", "demo.old-1"]
