"""`--runner dask`: model stages sharded over a two-worker LocalCluster give the same release as
the default runner."""

from __future__ import annotations

from pathlib import Path

from conftest import build, write_config


def release_bytes(result: dict) -> dict[str, bytes]:
    release = Path(result["release_dir"])
    return {str(p.relative_to(release)): p.read_bytes() for p in sorted(release.rglob("*.parquet"))}


def test_dask_runner_gives_the_default_release(tmp_path, sim_url):
    from pipeline.run.flow import build as build_flow
    from pipeline.run.shards import run_on_dask

    small = {"personas": {"per_category": 2}}
    default = build(write_config(tmp_path / "default", sim_url, **small))
    config = write_config(tmp_path / "dask", sim_url, **small)
    result = run_on_dask(build_flow, str(config), {}, workers=2, shards=2)

    assert release_bytes(result) == release_bytes(default)
    assert result["funnel"] == default["funnel"]
    # the shard tasks on the workers made every call; the stage tasks found them done
    calls = {s: u["calls"] for s, u in result["usage"].items()}
    assert calls == {s: u["calls"] for s, u in default["usage"].items()}
    assert calls["rubrics"] == 6 and calls["pairs"] == 18
    run_dir = Path(result["run_dir"])
    assert not any((run_dir / "shards").rglob("*.jsonl"))  # merged into the stage files
    assert len((run_dir / "filters.jsonl").read_text().splitlines()) == result["funnel"]["pairs"]
