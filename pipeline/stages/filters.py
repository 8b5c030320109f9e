"""Stage 5 — filters: keep a pair only if both answers are good and only personal fit separates
them. The checks are pipeline/checks/; every pair is written to filters.jsonl, kept or not, with
each check's result, every reason and every failed judge call.

Checks run cheapest first: the model-free ones (length ratio, near-duplicates) before any call,
then one judge check at a time; a pair that a check drops meets no later judge (its checks are
listed as `skipped`) unless `filters.evaluate_all: true`, the auditing mode that runs every
check on every pair, its judges at once. A judge call that fails after the call path's retries drops
the pair with reason `judge_<kind>`; what did succeed is still recorded. A permanent endpoint
error (bad key, unknown model) stops the run instead.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from pipeline.calls import CallResult, LLMError, PermanentLLMError
from pipeline.checks import CHECKS, by_cost
from pipeline.checks import tasks as check_tasks
from pipeline.errors import is_transient
from pipeline.llm.prompts import load_prompt
from pipeline.meter import timed
from pipeline.qualification import qualify
from pipeline.qualification import read as read_qualification
from pipeline.records import FilterRecord, Pair
from pipeline.stages.base import RunContext, Stage, StageReport, process_stage
from pipeline.store import Records


async def qualification(ctx: RunContext, pairs: Records, shared: dict | None = None) -> dict | None:
    """The judge answers a calibration set made of answers above the model-free floor, before
    any judge check: a judge that cannot tell a sound answer from a broken one stops the build
    here (pipeline/qualification.py). Once per run: a sharded run asks it before its shards.
    `shared`: the checks' run-level `prepare`s when the caller has made them already."""
    cfg = ctx.cfg.filters
    on = [c for c in CHECKS if c.enabled(cfg)]
    if not any(c.cost for c in on):
        return None
    floor = [c for c in on if c.floor]
    if shared is None:
        shared = {c.name: c.prepare(pairs, cfg) for c in floor if c.prepare}

    def above_floor(pair: Pair) -> bool:
        found = zip(floor, (c.measure(pair, {}, shared.get(c.name)) for c in floor), strict=True)
        return not any(r is not None and c.decide(r, cfg) for c, r in found)

    return await qualify(ctx, pairs, above_floor)


def unsettled(record: FilterRecord) -> bool:
    """A judge call that ran out of retries on a flaky endpoint: judge the pair again."""
    return any(is_transient(r) for r in [*record.reasons, *record.would_drop])


async def run(ctx: RunContext, pairs: Records) -> Records:
    cfg = ctx.cfg.filters
    prompts = {t: load_prompt(t) for t in check_tasks()}
    judge = ctx.cfg.model.judge
    on = [c for c in CHECKS if c.enabled(cfg)]  # an opt-in check switched off never runs
    shared = {}
    for c in (c for c in on if c.prepare):  # one pass over all (the artifact gate's AFLite)
        with timed(ctx.seconds, f"filters: {c.name} (run-level)"):
            shared[c.name] = c.prepare(pairs, cfg)
    with timed(ctx.seconds, "filters: qualification"):
        qualified = None if ctx.shard else await qualification(ctx, pairs, shared)
    # filters.judges qualified: no verdict of a judge that did not qualify
    weak = cfg.judges == "qualified" and not (read_qualification(ctx.run_dir) or {}).get("passed")
    unjudged = [c.name for c in on if c.cost] if weak else []
    on = [c for c in on if c.name not in unjudged]
    # evaluate_all asks every judge at once; otherwise every model-free check first (they cost
    # nothing), then one judge check at a time, cheapest first (in batch mode all judges in one
    # round: a round costs a job's turnaround there, and a call saved is not worth a day)
    free = [c for c in by_cost() if not c.cost and c in on]
    judges = [c for c in by_cost() if c.cost and c in on]
    record_only = cfg.mode == "record"  # every check on every pair, nothing dropped
    if cfg.evaluate_all or record_only:
        rounds = [on]
    elif ctx.llm.batched:
        rounds = [free, judges]
    else:
        rounds = [free, *([c] for c in judges)]

    async def ask(call) -> CallResult | LLMError:
        try:
            return await ctx.llm.call(
                prompts[call.task], stage=STAGE.name, model=judge, variables=call.variables
            )
        except PermanentLLMError:
            raise
        except LLMError as e:
            return e

    async def check(pair: Pair) -> FilterRecord:
        results: dict = {}  # check name -> its result
        reasons: dict[str, list[str]] = {}
        done: dict[str, CallResult] = {}
        errors: dict[str, LLMError] = {}
        skipped: list[str] = list(unjudged)
        for group in rounds:
            if (any(reasons.values()) or errors) and len(rounds) > 1:  # dropped already
                skipped += [c.name for c in group]
                continue
            planned = [(c, call) for c in group for call in c.calls(pair, shared.get(c.name))]
            answers = await asyncio.gather(*(ask(call) for _, call in planned))
            for (_, call), answer in zip(planned, answers, strict=True):
                if isinstance(answer, LLMError):
                    errors[call.name] = answer
                else:
                    done[call.name] = answer
            for c in group:
                with timed(ctx.seconds, f"filters: {c.name}"):
                    result = c.measure(pair, done, shared.get(c.name))
                if result is not None:
                    results[c.name] = result
                    reasons[c.name] = c.decide(result, cfg)
        # reasons and flags in the checks' own order, whatever order they ran in
        ordered = [r for c in CHECKS for r in reasons.get(c.name, ())]
        ordered += sorted({f"judge_{e.kind}" for e in errors.values()})
        return FilterRecord(
            pair=pair,
            checks={
                c.name: results[c.name].model_dump(mode="json") for c in CHECKS if c.name in results
            },
            judge_model=judge,
            kept=record_only or not ordered,
            reasons=[] if record_only else ordered,
            would_drop=ordered if record_only else [],
            flags=[f for c in CHECKS if c.name in results for f in c.flags(results[c.name])],
            errors={name: f"{e.kind}: {e.detail}" for name, e in errors.items()},
            calls={name: r.key for name, r in done.items()},
            skipped=skipped,
        )

    await process_stage(STAGE, pairs, ctx.run_dir, check)
    out = STAGE.outputs(ctx.run_dir, pairs)
    report = StageReport(out, 0, lost=Counter(), produced=set(), keys=[])
    for f in out:
        report.produced.add(f.pair.pair_id)
        report.keys.extend(f.calls.values())
        report.kept += f.kept
        report.lost.update(f.reasons)
        for reason in f.reasons if f.errors else ():  # an error behind a judge_* reason
            report.examples.setdefault(reason, next(iter(f.errors.values())))
    report.keys.extend(qualified["keys"] if qualified else ())  # billed to the judge
    if unjudged:  # the funnel says it: these pairs met no judge
        report.changed = {"not judged (the judge did not qualify)": len(report.produced)}
    return report


def _check_samples() -> dict[str, dict]:
    return {task: v for c in CHECKS for task, v in c.samples.items()}


STAGE = Stage(
    name="filters",
    reads=(Pair,),
    input_id=lambda p: p.pair_id,
    output=FilterRecord,
    output_id=lambda r: r.pair.pair_id,
    run=run,
    role="judge",
    unsettled=unsettled,
    before=qualification,
    tasks=check_tasks(),
    calls=tuple(name for c in CHECKS for name in c.call_names),
    samples=_check_samples(),
    funnel="filters_kept",
    about="{kept}",
    empty_hint="see `prb audit {run_id}`, and the thresholds under `filters:` in the config",
)
