"""Stage 3 — rubrics: a planner call derives rubric aspects and a narrative per task.

Every aspect must rest on the profile: its `evidence` cites a real profile item id in brackets
or quotes a profile item. Aspects that do neither are moved to `ungrounded_aspects` (kept for
the audit, never used); a plan with no grounded aspect left is dropped as `planner_ungrounded`.
An aspect the plan repeats (same words, any case or spacing) is kept once: a small real model
wrote one aspect five times, which would weigh it five times in the adherence judge's score.
"""

from __future__ import annotations

import re

from pipeline.llm import LLMError
from pipeline.prompts import load_prompt
from pipeline.records import Dropped, RubricAspect, RubricRecord, Task
from pipeline.stages.base import RunContext, Stage, model_stage_done, process_stage
from pipeline.store import Records

CITED_ID = re.compile(r"\[([^\[\]]+)\]")
QUOTE = re.compile(r"['\"‘“]([^'\"’”]{12,})['\"’”]")
MIN_QUOTE = 12  # characters of a quote that must occur verbatim in a profile item


def grounded(aspect: RubricAspect, task: Task) -> bool:
    ids = {i.id for i in task.persona.profile}
    if any(c.strip() in ids for c in CITED_ID.findall(aspect.evidence)):
        return True
    texts = [i.text.lower() for i in task.persona.profile]
    for quote in QUOTE.findall(aspect.evidence):
        quote = quote.strip().lower().rstrip(".…")
        if len(quote) >= MIN_QUOTE and any(quote in t for t in texts):
            return True
    return False


def distinct(aspects: list[RubricAspect]) -> list[RubricAspect]:
    seen: set[str] = set()
    out = []
    for a in aspects:
        key = " ".join(a.aspect.casefold().split())
        if key not in seen:
            seen.add(key)
            out.append(a)
    return out


async def run(ctx: RunContext, tasks: Records) -> Records:
    planner = load_prompt("planner")

    async def plan(task: Task) -> RubricRecord | Dropped:
        try:
            result = await ctx.llm.call(
                planner,
                stage=STAGE.name,
                model=ctx.cfg.model.generator,
                variables={
                    "profile": [i.model_dump() for i in task.persona.profile],
                    "question": task.question,
                },
            )
        except LLMError as e:  # a PermanentLLMError is not one: the run stops
            return Dropped(
                stage=STAGE.name, id=task.task_id, reason=f"planner_{e.kind}", detail=e.detail
            )
        aspects = result.value.rubric_aspects
        kept = distinct([a for a in aspects if grounded(a, task)])
        if not kept:
            return Dropped(
                stage=STAGE.name,
                id=task.task_id,
                reason="planner_ungrounded",
                detail=f"none of {len(aspects)} aspects cites a profile item of "
                f"{task.persona.persona_id}",
            )
        return RubricRecord(
            task=task,
            rubric_aspects=kept,
            narrative=result.value.narrative,
            ungrounded_aspects=[a for a in aspects if not grounded(a, task)],
            calls={"planner": result.key},
        )

    await process_stage(STAGE, tasks, ctx.run_dir, plan)  # sharded: finds the shards' work done
    return model_stage_done(STAGE, ctx, tasks)


_PROFILE = [{"id": "p1", "category": "sample", "text": "A sample profile item."}]

STAGE = Stage(
    name="rubrics",
    input=Task,
    input_id=lambda t: t.task_id,
    output=RubricRecord,
    output_id=lambda r: r.task.task_id,
    run=run,
    role="generator",
    tasks=("planner",),
    calls=("planner",),
    samples={"planner": {"profile": _PROFILE, "question": "A question?"}},
    funnel="rubrics",
    about="a planner model derives rubric aspects, each citing profile items as evidence, and "
    "a narrative",
)
