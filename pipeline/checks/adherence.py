"""Rubric adherence judge: per answer and per aspect, is it satisfied? `chosen` must follow
the user's aspects and `rejected` must miss them, or the pair does not test personal fit."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from pipeline.checks.base import Ask, Check, Figure, Released, Report, both
from pipeline.records import Record

ASPECTS = [{"aspect": "An aspect", "evidence": "[p1] 'sample'", "reason": "A reason."}]


class Settings(Record):
    min_adherence_chosen: float = Field(0.6, ge=0, le=1)
    max_adherence_rejected: float = Field(0.5, ge=0, le=1)


class Result(Record):
    # fraction of aspects satisfied
    chosen: Annotated[float | None, Released("adherence_chosen")] = None
    rejected: Annotated[float | None, Released("adherence_rejected")] = None
    aspects_chosen: list[bool] | None = None  # per aspect, in rubric order: satisfied?
    aspects_rejected: list[bool] | None = None


def tested(pair) -> list:
    """The aspects a pair's answers are judged on: every rubric aspect, or for a rewrite pair
    (`differences`) the user's statements on the dimensions it was rewritten on (both sides
    keep the base answer's fit on the rest, so judging those would fail chosen and pass
    rejected for what the pair never varied)."""
    if not pair.differences:
        return pair.rubric_aspects
    dims = {d.dimension for d in pair.differences}
    said = {p.statement for p in pair.task.persona.preferences if p.dimension in dims}
    return [a for a in pair.rubric_aspects if a.aspect in said] or pair.rubric_aspects


def ask(side: str) -> Ask:
    return Ask(
        f"adherence_{side}",
        "judge_adherence",
        lambda pair, _: {
            "question": pair.task.question,
            "aspects": [a.model_dump() for a in tested(pair)],
            "answer": getattr(pair, side),
        },
    )


def measure(pair, done, _) -> Result:
    r, n = Result(), len(tested(pair))
    for side in ("chosen", "rejected"):
        if f"adherence_{side}" in done:
            # an aspect the judge left out counts as not satisfied
            satisfied = {c.index for c in done[f"adherence_{side}"].value.checks if c.satisfied}
            flags = [i in satisfied for i in range(1, n + 1)]
            setattr(r, f"aspects_{side}", flags)
            setattr(r, side, round(sum(flags) / n, 4))
    return r


def decide(r: Result, s: Settings) -> list[str]:
    reasons = []
    if r.chosen is not None and r.chosen < s.min_adherence_chosen:
        reasons.append("chosen_not_adherent")
    if r.rejected is not None and r.rejected > s.max_adherence_rejected:
        reasons.append("rejected_adherent")
    return reasons


CHECK = Check(
    name="adherence",
    order=20,
    asks=(ask("chosen"), ask("rejected")),
    samples={
        "judge_adherence": {"question": "A question?", "aspects": ASPECTS, "answer": "An answer."}
    },
    settings=Settings,
    result=Result,
    measure=measure,
    decide=decide,
    report=Report(
        about="fraction of aspects each answer satisfies",
        docs={
            "min_adherence_chosen": "fraction of aspects `chosen` satisfies ≥",
            "max_adherence_rejected": "fraction of aspects `rejected` satisfies ≤",
        },
        figures=(
            Figure(
                "adherence",
                "aspects satisfied (adherence judge)",
                both("adherence_chosen", "adherence_rejected"),
                "sides",
                breakdown=True,
            ),
        ),
        severity=lambda r: ((1 - r.chosen) if r.chosen is not None else 0) + (r.rejected or 0),
    ),
)
