"""The Prefect flow `build`: the seven stages in order, one Prefect task per stage.

Model calls run concurrently with asyncio inside a stage task (bounded by llm.py's semaphore),
never as one Prefect task per call: Prefect's per-task bookkeeping would dominate. Resume is the
stage files' job, not Prefect's result cache, so tasks use NO_CACHE. The flow receives the config
path and plain overrides, never the API key, so the key cannot land in Prefect's database.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from pipeline import annotation, filters, pairs, personas, questions, release, rubrics
from pipeline.cache import ResponseCache
from pipeline.config import RunConfig, load_config
from pipeline.errors import NothingReleased, PrbError, StorageError
from pipeline.llm import LLM
from pipeline.preflight import open_run
from pipeline.records import Dropped, Persona, Task
from pipeline.store import Records, StageFile, atomic_write, current_drops

STAGES = ("personas", "questions", "rubrics", "pairs", "filters", "annotation", "release")


@task(name="personas", cache_policy=NO_CACHE)
def personas_task(cfg: RunConfig, run_dir: Path) -> int:
    sample = personas.sampled(cfg.personas, cfg.seed)  # the library or an imported source
    return StageFile(run_dir, "personas", Persona).write_all(sample)


@task(name="questions", cache_policy=NO_CACHE)
def questions_task(cfg: RunConfig, run_dir: Path) -> Records:
    pool = personas.source_questions(cfg.personas)
    sample = StageFile(run_dir, "personas", Persona).read()
    tasks = questions.assign_questions(sample, pool, cfg.personas.questions_per_persona, cfg.seed)
    StageFile(run_dir, "questions", Task).write_all(tasks)
    return Records(StageFile(run_dir, "questions", Task), questions.task_key)


def stage_outputs(stage, run_dir: Path, inputs: Records) -> Records:
    """The stage file's latest record for each of `inputs` (a record and its input share an id):
    read from disk by whoever uses it, so no stage is ever held in memory whole."""
    wanted = {stage.input_id(x) for x in inputs}
    return Records(StageFile(run_dir, stage.STAGE, stage.OUTPUT), stage.output_id, wanted)


def _model_stage_task(stage):
    @task(name=stage.STAGE, cache_policy=NO_CACHE)
    async def run_stage(cfg: RunConfig, llm: LLM, run_dir: Path, inputs: Records) -> Records:
        get_run_logger().info("%s: %s", stage.STAGE, await stage.run(cfg, llm, run_dir, inputs))
        return stage_outputs(stage, run_dir, inputs)

    return run_stage


MODEL_STAGE_TASKS = {m.STAGE: _model_stage_task(m) for m in (rubrics, pairs, filters)}


async def model_stage(stage, cfg: RunConfig, llm: LLM, run_dir: Path, inputs: Records, shards):
    """One model stage: with shards, they make the calls and the stage task finds them done."""
    if shards:
        from pipeline.shards import run_sharded

        await run_sharded(stage.STAGE, cfg, llm, run_dir, inputs, shards)
    return await MODEL_STAGE_TASKS[stage.STAGE](cfg, llm, run_dir, inputs)


def summarise(stage, records: Records) -> tuple[set[str], list[str]]:
    """The ids a stage produced and the cache keys of the answers they used (one pass)."""
    ids: set[str] = set()
    keys: list[str] = []
    for r in records:
        ids.add(stage.output_id(r))
        keys.extend(r.calls.values())
    return ids, keys


@task(name="annotation", cache_policy=NO_CACHE)
def annotation_task(cfg: RunConfig, run_dir: Path, filtered: Records):
    return annotation.run(cfg, run_dir, filtered)


@task(name="release", cache_policy=NO_CACHE)
def release_task(cfg, run_dir, filtered, verdicts, funnel, drop_reasons, cache, keys) -> Path:
    return release.run(cfg, run_dir, filtered, verdicts, funnel, drop_reasons, cache, keys)


HINTS = {  # what to do about the usual cause of a stage losing every record
    "endpoint_error": "is the endpoint up? Rerun the same command to resume once it is",
    "unparseable": "the model's answers did not parse: check the model and its output mode",
    "bad_request": "the endpoint rejected the requests: check the model name and its limits",
    "content_filter": "the provider's content filter refused every answer",
    "ungrounded": "no plan cited the profile: check the planner model and prompt",
}


def why_nothing(
    cfg: RunConfig, funnel: dict, drops: list[Dropped], reasons: Counter, examples: dict
) -> str:
    """One line: where every record was lost, the main reason with an example, what to do."""
    steps = [("rubrics", "questions", "tasks"), ("pairs", "rubrics", "rubrics")]
    for stage, before, what in steps:
        if funnel[before] and not funnel[stage]:
            lost = [d for d in drops if d.stage == stage]
            top, n = Counter(d.reason for d in lost).most_common(1)[0] if lost else ("?", 0)
            example = next((d.detail for d in lost if d.reason == top), "")
            hint = next((h for k, h in HINTS.items() if top.endswith(k)), "see `prb audit`")
            return (
                f"0 pairs released: {n} of {funnel[before]} {what} dropped at {stage} "
                f"({top}{': ' + example if example else ''}): {hint}"
            )
    if not funnel["questions"]:
        return "0 pairs released: no persona was given a question: check personas and questions"
    if not funnel["filters_kept"]:
        top = ", ".join(f"{r} {n}" for r, n in reasons.most_common(3))
        first = reasons.most_common(1)[0][0] if reasons else ""
        hint = next((h for k, h in HINTS.items() if first.endswith(k)), None) or (
            f"see `prb audit {cfg.run_id}`, and the thresholds under `filters:` in the config"
        )
        example = f"; e.g. {examples[first]}" if first in examples else ""
        return (
            f"0 pairs released: the filters dropped all {funnel['pairs']} pairs "
            f"({top}{example}): {hint}"
        )
    return (
        f"0 pairs released: annotation.required is true and none of the {funnel['filters_kept']} "
        f"kept pairs has a confirmed human verdict: `prb annotate export {cfg.run_id}`, import "
        "the labels, then rebuild (or set annotation.required: false)"
    )


@flow(name="build", persist_result=False, log_prints=True)
async def build(
    config_path: str | None = None,
    overrides: dict | None = None,
    mode: str = "online",
    shards: int = 0,
    force_new_run: bool = False,
) -> dict:
    """Run every stage for one run id; a rerun resumes and repeats no finished work.

    mode "batch" sends model calls through the Batch API (pipeline/batch.py); shards > 0 runs
    each model stage as that many shard tasks on the flow's task runner (pipeline/shards.py).
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
    # lock the run dir, check prompts render and the config fingerprint: before any model call
    lock = open_run(cfg, force_new=force_new_run)
    cache = ResponseCache(cfg.cache_path)
    if mode == "batch":
        from pipeline.batch import BatchLLM

        llm = BatchLLM(cfg, cache, run_dir)
    else:
        llm = LLM(cfg.model, cache)
    failed = False
    try:
        # stages hand each other Records (a stage file read from disk on demand), never lists:
        # every record carries its persona, so holding a stage in memory grows with the run
        # (bench/scale.py); only ids and cache keys are kept for the funnel and the manifest
        funnel: dict[str, int] = {"personas": personas_task(cfg, run_dir)}
        produced: dict[str, set[str]] = {}
        keys: dict[str, list[str]] = {}
        records = questions_task(cfg, run_dir)
        funnel["questions"] = len(records)
        for stage in (rubrics, pairs, filters):
            records = await model_stage(stage, cfg, llm, run_dir, records, shards)
            produced[stage.STAGE], keys[stage.STAGE] = summarise(stage, records)
        funnel["rubrics"], funnel["pairs"] = len(produced["rubrics"]), len(produced["pairs"])
        filtered = records
        verdicts = annotation_task(cfg, run_dir, filtered)
        drops = current_drops(run_dir, produced)
        filtered_out: Counter[str] = Counter()
        examples: dict[str, str] = {}  # a failed judge call's error, per drop reason
        kept = 0
        for f in filtered:
            kept += f.kept
            filtered_out.update(f.reasons)
            for reason in f.reasons if f.errors else ():
                examples.setdefault(reason, next(iter(f.errors.values())))
        reasons = Counter(d.reason for d in drops) + filtered_out
        funnel["filters_kept"] = kept
        funnel["annotation_passed"] = sum(annotation.releasable(cfg, v) for v in verdicts)
        if not funnel["annotation_passed"]:  # a release of nothing is no release
            raise NothingReleased(why_nothing(cfg, funnel, drops, filtered_out, examples))
        release_dir = release_task(
            cfg, run_dir, filtered, verdicts, funnel, dict(sorted(reasons.items())), cache, keys
        )
    except BaseException:
        failed = True
        raise
    finally:
        await llm.aclose()
        cache.close()
        stats = {
            "run_id": cfg.run_id,
            "wall_seconds": round(time.monotonic() - started, 3),
            "usage": llm.usage_dict(),
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
    manifest = json.loads((release_dir / "manifest.json").read_text())
    return {
        "run_dir": str(run_dir),
        "release_dir": str(release_dir),
        "funnel": {f["stage"]: f["count"] for f in manifest["funnel"]},
        "usage": stats["usage"],
    }
