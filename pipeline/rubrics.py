"""Stage 3 — rubrics: a planner call derives rubric aspects and a narrative per task.

Every aspect must rest on the profile: its `evidence` cites a real profile item id in brackets
or quotes a profile item. Aspects that do neither are moved to `ungrounded_aspects` (kept for
the audit, never used); a plan with no grounded aspect left is dropped as `planner_ungrounded`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.llm import LLM, LLMError, PermanentLLMError
from pipeline.prompts import load_prompt
from pipeline.records import Dropped, RubricAspect, RubricRecord, Task
from pipeline.store import StageFile, process_stage

STAGE = "rubrics"
OUTPUT = RubricRecord


def input_id(task: Task) -> str:
    return task.task_id


def output_id(record: RubricRecord) -> str:
    return record.task.task_id


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


async def run(cfg: RunConfig, llm: LLM, run_dir: Path, tasks: Iterable[Task]) -> dict[str, int]:
    planner = load_prompt("planner")

    async def plan(task: Task) -> RubricRecord | Dropped:
        try:
            result = await llm.call(
                planner,
                stage=STAGE,
                model=cfg.model.generator,
                variables={
                    "profile": [i.model_dump() for i in task.persona.profile],
                    "question": task.question,
                },
            )
        except PermanentLLMError:
            raise
        except LLMError as e:
            return Dropped(
                stage=STAGE, id=task.task_id, reason=f"planner_{e.kind}", detail=e.detail
            )
        aspects = result.value.rubric_aspects
        kept = [a for a in aspects if grounded(a, task)]
        if not kept:
            return Dropped(
                stage=STAGE,
                id=task.task_id,
                reason="planner_ungrounded",
                detail=f"none of {len(aspects)} aspects cites a profile item of "
                f"{task.persona.persona_id}",
            )
        return RubricRecord(
            task=task,
            rubric_aspects=kept,
            narrative=result.value.narrative,
            ungrounded_aspects=[a for a in aspects if a not in kept],
            calls={"planner": result.key},
        )

    return await process_stage(
        STAGE,
        tasks,
        input_id=input_id,
        out=StageFile(run_dir, STAGE, OUTPUT),
        output_id=output_id,
        run_dir=run_dir,
        fn=plan,
    )
