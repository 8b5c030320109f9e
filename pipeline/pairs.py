"""Stage 4 — pairs: one shared content plan, then a chosen answer that follows every aspect and
a rejected answer with the same key points and word budget that misses them by a named strategy.
Equal general quality comes from the shared plan; the filters stage checks it held."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pipeline.config import RunConfig
from pipeline.llm import LLM, LLMError, PermanentLLMError
from pipeline.prompts import load_prompt
from pipeline.records import Dropped, Pair, RubricRecord, stable_id
from pipeline.store import StageFile, process_stage

STAGE = "pairs"
OUTPUT = Pair
TASKS = ("content_plan", "chosen", "rejected")


def input_id(record: RubricRecord) -> str:
    return record.task.task_id


def output_id(pair: Pair) -> str:
    return pair.task.task_id


def pick_strategy(task_id: str, strategies: list[str], seed: int) -> str:
    """Seeded and per task, so adding tasks never reshuffles the strategies of existing ones."""
    return strategies[int(stable_id(seed, task_id), 16) % len(strategies)]


def pair_id(
    persona_id: str, question: str, profile: list[dict], prompt_versions: dict[str, str]
) -> str:
    """Content-derived: the same user (with the same profile), question and prompts give the
    same id; an edited profile gives a new one, so an old pair never passes for a new one."""
    return stable_id(persona_id, question, profile, prompt_versions, prefix="prb-")


async def run(cfg: RunConfig, llm: LLM, run_dir: Path, rubrics: Iterable[RubricRecord]):
    prompts = {t: load_prompt(t) for t in TASKS}
    versions = {t: p.ref for t, p in prompts.items()}
    instructions = prompts["rejected"].extra["strategies"]
    unknown = set(cfg.generation.strategies) - set(instructions)
    if unknown:
        raise ValueError(f"generation.strategies: unknown strategies {sorted(unknown)}")
    model = cfg.model.generator
    budget = cfg.generation.word_budget

    async def generate(rec: RubricRecord) -> Pair | Dropped:
        task = rec.task
        aspects = [a.model_dump() for a in rec.rubric_aspects]
        strategy = pick_strategy(task.task_id, cfg.generation.strategies, cfg.seed)
        profile = [i.model_dump() for i in task.persona.profile]
        pid = pair_id(task.persona.persona_id, task.question, profile, versions)
        try:
            plan = await llm.call(
                prompts["content_plan"],
                stage=STAGE,
                model=model,
                variables={"question": task.question},
            )
            common = {
                "question": task.question,
                "key_points": plan.value.key_points,
                "aspects": aspects,
                "word_budget": budget,
            }
            chosen = await llm.call(prompts["chosen"], stage=STAGE, model=model, variables=common)
            rejected = await llm.call(
                prompts["rejected"],
                stage=STAGE,
                model=model,
                variables={
                    **common,
                    "strategy": strategy,
                    "strategy_instruction": instructions[strategy],
                },
            )
        except PermanentLLMError:
            raise  # the run must stop, not drop every pair
        except LLMError as e:
            return Dropped(
                stage=STAGE, id=task.task_id, reason=f"generator_{e.kind}", detail=e.detail
            )
        return Pair(
            pair_id=pid,
            task=task,
            rubric_aspects=rec.rubric_aspects,
            narrative=rec.narrative,
            key_points=plan.value.key_points,
            chosen=chosen.value,
            rejected=rejected.value,
            rejected_strategy=strategy,
            generator_model=model,
            prompt_versions=versions,
            calls={"content_plan": plan.key, "chosen": chosen.key, "rejected": rejected.key},
        )

    return await process_stage(
        STAGE,
        rubrics,
        input_id=input_id,
        out=StageFile(run_dir, STAGE, OUTPUT),
        output_id=output_id,
        run_dir=run_dir,
        fn=generate,
    )
