"""Stage 2 — questions: give each sampled persona its question(s), seeded, never repeating a
persona × question. A persona asks from the questions that list it in `asked_by`, then from its
category's open pool."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Iterator

from pipeline.records import Persona, Question, Task, stable_id


def task_id(persona_id: str, question: str) -> str:
    return stable_id(persona_id, question, prefix="t-")


def task_key(task: Task) -> str:
    return task.task_id


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
            )
