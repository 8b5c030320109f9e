"""Stage 2 — questions: give each sampled persona its question(s), seeded, never repeating a
persona × question. A persona asks from the questions that list it in `asked_by`, then from its
category's open pool."""

from __future__ import annotations

import random

from pipeline.records import Persona, Question, Task, stable_id


def task_id(persona_id: str, question: str) -> str:
    return stable_id(persona_id, question, prefix="t-")


def assign_questions(
    personas: list[Persona], questions: list[Question], per_persona: int, seed: int
) -> list[Task]:
    tasks: list[Task] = []
    for persona in personas:
        rng = random.Random(f"questions:{seed}:{persona.persona_id}")
        own = sorted(
            (q for q in questions if persona.persona_id in q.asked_by), key=lambda q: q.question_id
        )
        pool = sorted(
            (q for q in questions if q.category == persona.category and not q.asked_by),
            key=lambda q: q.question_id,
        )
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
            tasks.append(
                Task(
                    task_id=task_id(persona.persona_id, q.question),
                    persona=persona,
                    question_id=q.question_id,
                    question=q.question,
                    category=persona.category,
                )
            )
    return tasks
