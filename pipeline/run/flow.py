"""The Prefect flow `build`: the stages of pipeline/stages/ in order, one Prefect task per stage.

Model calls run concurrently with asyncio inside a stage task (bounded by the call path's
semaphore), never as one Prefect task per call: Prefect's per-task bookkeeping would
dominate. Resume is the stage files' job, not Prefect's result cache, so tasks use NO_CACHE.
The flow receives the config path and plain overrides, never the API key, so the key cannot
land in Prefect's database.
"""

from __future__ import annotations

import json
import time

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from pipeline.config import load_config
from pipeline.errors import PrbError, StorageError
from pipeline.llm.cache import ResponseCache
from pipeline.llm.client import LLM
from pipeline.meter import give_back_freed_arrays, peak_rss_gib, reset_peak
from pipeline.release.manifest import write_funnel
from pipeline.run import stopping
from pipeline.run.rundir import open_run
from pipeline.stages import STAGES, RunContext, Stage
from pipeline.store import atomic_write

_TASKS: dict[str, object] = {}


def stage_task(stage: Stage):
    """The stage as a Prefect task (one per stage, made once)."""
    if stage.name in _TASKS:
        return _TASKS[stage.name]

    @task(name=stage.name, cache_policy=NO_CACHE)
    async def run_stage(ctx: RunContext, previous):
        return await stage.run(ctx, previous)

    _TASKS[stage.name] = run_stage
    return run_stage


@flow(name="build", persist_result=False, log_prints=True)
async def build(
    config_path: str | None = None,
    overrides: dict | None = None,
    mode: str = "online",
    shards: int = 0,
    force_new_run: bool = False,
) -> dict:
    """Run every stage for one run id; a rerun resumes and repeats no finished work.

    mode "batch" sends model calls through the Batch API (pipeline/llm/batch.py); shards > 0 runs
    each model stage as that many shard tasks on the flow's task runner (pipeline/run/shards.py).
    force_new_run moves an existing run directory aside (`<run>.old-N`) and starts afresh.
    """
    if mode not in ("online", "batch") or (mode == "batch" and shards):
        raise PrbError(f"mode {mode!r} with shards={shards}: use online or batch, not both")
    overrides = dict(overrides or {})
    if any("api_key" in k for k in overrides):
        raise PrbError("pass the API key through PRB_API_KEY or PRB_API_KEY_FILE, not overrides")
    started = time.monotonic()
    cfg = load_config(config_path, **overrides)
    run_dir = cfg.run_dir
    # lock the run dir, check prompts render, the persona source and the fingerprint: all
    # before any model call
    lock = open_run(cfg, force_new=force_new_run)
    cache_ = ResponseCache(cfg.cache_path)
    transport = None
    if mode == "batch":
        from pipeline.llm.batch import BatchTransport

        transport = BatchTransport(cfg.batch, run_dir)
    llm = LLM(cfg.model, cache_, transport=transport)
    ctx = RunContext(cfg, run_dir, llm, cache_, shards=shards, stages=STAGES)
    failed = False
    spent: dict[str, dict] = {}  # stage -> its wall time and peak memory
    give_back_freed_arrays()
    stopping.inside_flow()  # Prefect put its own SIGTERM handler in for the flow
    try:
        # stages hand each other Records (a stage file read from disk on demand), never lists:
        # every record carries its persona, so holding a stage in memory grows with the run
        # (bench/scale.py); only ids and cache keys are kept for the funnel and the manifest
        previous = None
        for stage in STAGES:
            reset_peak()
            t0 = time.monotonic()
            # a stage's input, by declaration: what the latest stage writing its first read
            # type handed on (the stage list was checked at assembly: one did)
            previous = ctx.read(stage.reads[0]) if stage.reads else None
            if shards and stage.role:
                # shard tasks make the calls first, and the stage task finds them done; they are
                # submitted from the flow, not from inside a task (Dask could not ship them)
                from pipeline.run.shards import run_sharded

                if stage.before:  # once over the whole run, before the shards
                    await stage.before(ctx, previous)
                await run_sharded(stage, ctx, previous)
            report = await stage_task(stage)(ctx, previous)
            ctx.reports[stage.name], previous = report, report.output
            if stage.output is not None:
                ctx.outputs[stage.output] = previous
            write_funnel(run_dir, ctx.funnel, ctx.lost, ctx.changed)  # for `prb audit`, however far
            spent[stage.name] = {
                "wall_s": round(time.monotonic() - t0, 3),
                "peak_rss_gib": peak_rss_gib(),
            }
            if (u := llm.usage.get(stage.name)) is not None and u.calls:
                # where a model stage's time went: requests at the endpoint, or prb's own work
                # (and waits) while the model sat idle
                spent[stage.name]["model_busy_s"] = round(u.busy_s, 3)
                spent[stage.name]["model_idle_s"] = round(
                    max(0.0, spent[stage.name]["wall_s"] - u.busy_s), 3
                )
        release_dir = previous
    except BaseException:
        failed = True
        raise
    finally:
        await llm.aclose()
        cache_.close()
        stats = {
            "run_id": cfg.run_id,
            "wall_seconds": round(time.monotonic() - started, 3),
            "usage": llm.usage_dict(),
            "stages": spent,
            # parts of a stage (the artifact gate, each floor check, qualification), in seconds
            "parts": {k: round(v, 3) for k, v in sorted(ctx.seconds.items())},
        }
        # run-dependent figures live beside the release, never inside the hashed files; written
        # however the run ended, so a failed run's calls and retries are on record too (unless
        # the disk is what failed: then the first error is the one to report)
        try:
            with atomic_write(run_dir / "run_stats.json") as f:
                json.dump(stats, f, indent=2, sort_keys=True)
        except StorageError:
            if not failed:
                raise
        finally:
            lock.release()
    return {
        "run_dir": str(run_dir),
        "release_dir": str(release_dir),
        "funnel": dict(ctx.funnel),
        "usage": stats["usage"],
    }
