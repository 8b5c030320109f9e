"""Model stages split into shards that run as Prefect tasks on the flow's task runner, so that
`prb build --runner dask [--address ADDR]` spreads them over a Dask cluster (prefect-dask).

A shard is the not-yet-done records of a set of personas (persona id hash, so the same-persona
duplicate-question check sees all of a persona's pairs). Each shard task builds its own LLM and
cache from the config, runs the ordinary stage function into `<run_dir>/shards/<stage>/<k>/`
(resumable like any stage folder), and the flow then merges the shard files into the run's
stage file, skipping ids already there. The stage task that follows finds everything done and
makes no call. The response cache is one SQLite file: workers on other machines need it (and
the outputs folder) on a shared filesystem.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from pipeline.config import RunConfig
from pipeline.llm.client import session
from pipeline.records import stable_id
from pipeline.stages import RunContext, Stage, model_stages
from pipeline.store import Records, dropped_file, settled_ids


def persona_of(record) -> str:
    """The persona of a stage input: a Task has it, every later record carries its Task."""
    task = getattr(record, "task", record)
    return task.persona.persona_id


@task(name="shard", cache_policy=NO_CACHE)
async def run_shard(
    stage: str, cfg: RunConfig, shard_dir: str, inputs: Records, reads: dict
) -> dict:
    async with session(cfg) as llm:
        ctx = RunContext(cfg, Path(shard_dir), llm, llm.cache, shard=True)
        ctx.outputs.update(reads)  # the stage's other declared reads, whole (Records: files)
        await _stage(stage).run(ctx, inputs)
    return llm.usage_dict()


def _stage(name: str) -> Stage:
    return next(s for s in model_stages() if s.name == name)


def merge(stage: Stage, run_dir: Path) -> None:
    """Append every shard's records (and drops) to the run's files, then remove the shards."""
    out, drops = stage.file(run_dir), dropped_file(run_dir)
    done = settled_ids(stage.name, out, stage.output_id, run_dir, stage.unsettled)
    root = run_dir / "shards" / stage.name
    for shard in sorted(root.glob("*")) if root.exists() else []:
        # a shard's lines supersede earlier unsettled ones, as a resumed stage's do
        with out.appender() as append:
            for r in stage.file(shard).read():
                if stage.output_id(r) not in done:
                    append(r)
        with drops.appender() as append:
            for d in dropped_file(shard).read():
                if d.stage == stage.name and d.id not in done:
                    append(d)
        shutil.rmtree(shard)


async def run_sharded(stage: Stage, ctx: RunContext, inputs: Records) -> None:
    """Run `stage` over `inputs` as `ctx.shards` shard tasks on the current flow's task runner.
    A shard task gets its slice as Records (the input file and the ids it owns), not records."""
    run_dir, n = ctx.run_dir, ctx.shards
    merge(stage, run_dir)  # shards left by an interrupted run count as done
    done = settled_ids(stage.name, stage.file(run_dir), stage.output_id, run_dir, stage.unsettled)
    groups: dict[int, list[str]] = {}
    todo: set[int] = set()
    for x in inputs:  # a shard gets all of its personas' records, as filters needs them
        k = int(stable_id(persona_of(x)), 16) % n
        groups.setdefault(k, []).append(inputs.key(x))
        if stage.input_id(x) not in done:
            todo.add(k)
    futures = [
        run_shard.submit(
            stage.name,
            ctx.cfg,
            str(run_dir / "shards" / stage.name / f"{k:03d}"),
            inputs.subset(ids),
            {t: ctx.read(t) for t in stage.reads[1:]},
        )
        for k, ids in sorted(groups.items())
        if k in todo
    ]
    for future in futures:
        usage = await asyncio.to_thread(future.result)
        for name, u in usage.items():  # the shards' calls count in the run's usage
            mine = ctx.llm.usage[name]
            for field in ("calls", "cache_hits", "prompt_tokens", "completion_tokens"):
                setattr(mine, field, getattr(mine, field) + u[field])
            mine.retries.update(u["retries"])
            mine.failures.update(u["failures"])
    merge(stage, run_dir)


def dask_task_runner(address: str | None = None, workers: int = 2):
    """prefect-dask's DaskTaskRunner: an existing cluster at `address`, or a LocalCluster.

    Workers must report to the same Prefect API as the flow (else each starts its own temporary
    server on one database): the current API URL is exported to them via PREFECT_API_URL.
    """
    from prefect.settings import get_current_settings
    from prefect_dask import DaskTaskRunner

    url = get_current_settings().api.url
    if url:
        os.environ["PREFECT_API_URL"] = str(url)
    if address:
        return DaskTaskRunner(address=address)
    tmp = os.environ.setdefault("DASK_TEMPORARY_DIRECTORY", tempfile.mkdtemp(prefix="prb-dask-"))
    return DaskTaskRunner(
        cluster_kwargs={
            "n_workers": workers,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
            "local_directory": tmp,
        }
    )


def run_on_dask(flow, config_path, overrides, *, address=None, workers=2, shards=8) -> dict:
    """Run the build flow with a DaskTaskRunner, model stages split into `shards` tasks."""
    from pipeline.run.prefect_env import api_server

    # one Prefect API for the flow and every Dask worker (else each starts its own server)
    with api_server():
        runner = dask_task_runner(address, workers)
        flow = flow.with_options(task_runner=runner)
        return asyncio.run(flow(config_path, overrides, shards=shards))
