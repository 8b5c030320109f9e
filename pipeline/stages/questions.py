"""Stage 2 — questions: give each sampled persona its question(s), seeded, never repeating a
persona × question. A persona asks from the questions that list it in `asked_by`, then from its
category's open pool."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Iterator

from pipeline.config import ProfileConfig
from pipeline.personas.sources import source_for
from pipeline.records import Persona, Question, Task, task_id
from pipeline.retrieval import check as check_retriever
from pipeline.retrieval import rank
from pipeline.stages.base import RunContext, Stage, StageReport
from pipeline.store import Records


def assign_questions(
    personas: Iterable[Persona], questions: list[Question], per_persona: int, seed: int
) -> Iterator[Task]:
    """Each persona's tasks in turn (a generator: the stage writes them as they come)."""
    by_id = sorted(questions, key=lambda q: q.question_id)
    own_of: dict[str, list[Question]] = defaultdict(list)  # indexed once: 50,000 personas
    open_of: dict[str, list[Question]] = defaultdict(list)  # must not rescan every question
    for q in by_id:
        for asker in q.asked_by:
            own_of[asker].append(q)
        if not q.asked_by:
            open_of[q.category].append(q)
    for persona in personas:
        rng = random.Random(f"questions:{seed}:{persona.persona_id}")
        own = list(own_of.get(persona.persona_id, ()))
        pool = list(open_of.get(persona.category, ()))
        rng.shuffle(own)
        rng.shuffle(pool)
        seen: set[str] = set()
        for q in own + pool:
            if len(seen) >= per_persona:
                break
            key = q.question.strip().lower()
            if key in seen:
                continue
            seen.add(key)
            yield Task(
                task_id=task_id(persona.persona_id, q.question),
                persona=persona,
                question_id=q.question_id,
                question=q.question,
                category=persona.category,
                imported_aspects=q.rubric_aspects,
                imported_narrative=q.narrative,
            )


def select_profile(task: Task, cfg: ProfileConfig) -> Task:
    """profile.top_k: rank the user's posts against the question, keep the best k."""
    if not cfg.top_k:
        return task
    ranking = rank(task.question, task.persona.profile, cfg)
    return task.model_copy(
        update={"profile_ranking": ranking, "profile_ids": [r.id for r in ranking[: cfg.top_k]]}
    )


async def run(ctx: RunContext, personas: Records) -> StageReport:
    cfg = ctx.cfg.personas
    pool = source_for(cfg).questions(cfg)
    tasks = assign_questions(personas, pool, cfg.questions_per_persona, ctx.cfg.seed)
    STAGE.file(ctx.run_dir).write_all(select_profile(t, ctx.cfg.profile) for t in tasks)
    records = Records(STAGE.file(ctx.run_dir), STAGE.output_id)
    return StageReport(records, len(records))


STAGE = Stage(
    name="questions",
    reads=(Persona,),
    input_id=lambda p: p.persona_id,
    output=Task,
    output_id=lambda t: t.task_id,
    run=run,
    # a dense retriever that cannot load fails before any call
    preflight=lambda cfg: check_retriever(cfg.profile),
    funnel="questions",
    about="one question per persona: its own question if it has one, else one from the "
    "category's pool{profile_selection}",
)
