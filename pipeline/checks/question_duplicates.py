"""Near-duplicate questions of one persona, model-free: the same user asking the same question
twice would weigh that user double. The same question asked by different personas is the
point of the benchmark, not a duplicate."""

from __future__ import annotations

from pydantic import Field
from rapidfuzz import fuzz

from pipeline.checks.base import Check, Report
from pipeline.records import Record


class Settings(Record):
    max_question_similarity: float = Field(0.9, ge=0, le=1)  # same persona, token-set ratio


class Result(Record):
    duplicate_of: str | None = None  # the pair whose question this one repeats


def duplicates(pairs, settings: Settings) -> dict[str, str]:
    """pair_id -> the pair it duplicates: same persona, near-identical question; the first id
    wins. Keeps ids and questions only, so `pairs` can stream from a stage file."""
    dup: dict[str, str] = {}
    by_persona: dict[str, list[tuple[str, str]]] = {}
    for pair_id, persona_id, question in sorted(
        (p.pair_id, p.task.persona.persona_id, p.task.question) for p in pairs
    ):
        seen = by_persona.setdefault(persona_id, [])
        for other_id, other in seen:
            if fuzz.token_set_ratio(question, other) >= 100 * settings.max_question_similarity:
                dup[pair_id] = other_id
                break
        else:
            seen.append((pair_id, question))
    return dup


CHECK = Check(
    name="question_duplicates",
    order=60,
    settings=Settings,
    result=Result,
    prepare=duplicates,
    measure=lambda pair, _, dups: Result(duplicate_of=dups.get(pair.pair_id)),
    decide=lambda r, s: ["near_duplicate_question"] if r.duplicate_of else [],
    report=Report(
        docs={
            "max_question_similarity": "two questions of one persona at least this similar "
            "(token-set ratio) are duplicates; the later pair is dropped:",
        },
        severity=lambda r: 2 * bool(r.duplicate_of),
    ),
)
