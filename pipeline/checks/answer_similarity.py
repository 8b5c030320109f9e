"""Answer near-duplicates, model-free: two answers that are nearly the same text cannot differ
in personal fit either."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from rapidfuzz import fuzz

from pipeline.checks.base import Check, Released, Report
from pipeline.records import Record


class Settings(Record):
    max_answer_similarity: float = Field(0.95, ge=0, le=1)


class Result(Record):
    # rapidfuzz ratio of the two answers, 0-1
    similarity: Annotated[float, Released("answer_similarity")]


CHECK = Check(
    name="answer_similarity",
    order=50,
    settings=Settings,
    result=Result,
    measure=lambda pair, _, __: Result(
        similarity=round(fuzz.ratio(pair.chosen, pair.rejected) / 100, 4)
    ),
    decide=lambda r, s: (
        ["answers_near_duplicate"] if r.similarity > s.max_answer_similarity else []
    ),
    report=Report(
        about="answer similarity",
        docs={"max_answer_similarity": "textual similarity of the two answers ≤"},
        severity=lambda r: 2 * r.similarity**8,
    ),
)
