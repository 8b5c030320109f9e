"""Stage 3 — rubrics: a planner call derives rubric aspects and a narrative per task."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import RunConfig
from pipeline.llm import LLM, LLMError
from pipeline.prompts import load_prompt
from pipeline.records import Dropped, RubricRecord, Task
from pipeline.store import StageFile, process_stage

STAGE = "rubrics"


async def run(cfg: RunConfig, llm: LLM, run_dir: Path, tasks: list[Task]) -> dict[str, int]:
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
        except LLMError as e:
            return Dropped(
                stage=STAGE, id=task.task_id, reason=f"planner_{e.kind}", detail=e.detail
            )
        return RubricRecord(
            task=task,
            rubric_aspects=result.value.rubric_aspects,
            narrative=result.value.narrative,
            calls={"planner": result.key},
        )

    return await process_stage(
        STAGE,
        tasks,
        input_id=lambda t: t.task_id,
        out=StageFile(run_dir, STAGE, RubricRecord),
        output_id=lambda r: r.task.task_id,
        run_dir=run_dir,
        fn=plan,
    )
