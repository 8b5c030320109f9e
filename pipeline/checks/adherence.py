"""Rubric adherence judge: per answer and per aspect, is it satisfied? `chosen` must follow
the user's aspects and `rejected` must miss them, or the pair does not test personal fit."""

from __future__ import annotations

from pydantic import Field

from pipeline.checks.base import Call, Check, Figure
from pipeline.records import Record

ASPECTS = [{"aspect": "An aspect", "evidence": "[p1] 'sample'", "reason": "A reason."}]


class Settings(Record):
    min_adherence_chosen: float = Field(0.6, ge=0, le=1)
    max_adherence_rejected: float = Field(0.5, ge=0, le=1)


class Result(Record):
    chosen: float | None = None  # fraction of aspects satisfied
    rejected: float | None = None
    aspects_chosen: list[bool] | None = None  # per aspect, in rubric order: satisfied?
    aspects_rejected: list[bool] | None = None


def calls(pair) -> list[Call]:
    aspects = [a.model_dump() for a in pair.rubric_aspects]
    return [
        Call(
            f"adherence_{side}",
            "judge_adherence",
            {"question": pair.task.question, "aspects": aspects, "answer": getattr(pair, side)},
        )
        for side in ("chosen", "rejected")
    ]


def measure(pair, done, _) -> Result:
    r, n = Result(), len(pair.rubric_aspects)
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
    cost=2,
    tasks=("judge_adherence",),
    samples={
        "judge_adherence": {"question": "A question?", "aspects": ASPECTS, "answer": "An answer."}
    },
    settings=Settings,
    result=Result,
    calls=calls,
    call_names=("adherence_chosen", "adherence_rejected"),
    measure=measure,
    decide=decide,
    about="fraction of aspects each answer satisfies",
    docs={
        "min_adherence_chosen": "fraction of aspects `chosen` satisfies ≥",
        "max_adherence_rejected": "fraction of aspects `rejected` satisfies ≤",
    },
    features={
        "adherence_chosen": "float64",
        "adherence_rejected": "float64",
    },
    released=lambda r: {"adherence_chosen": r.chosen, "adherence_rejected": r.rejected},
    figures=(
        Figure(
            "adherence",
            "aspects satisfied (adherence judge)",
            lambda v: (
                None
                if v.get("adherence_chosen") is None or v.get("adherence_rejected") is None
                else (v["adherence_chosen"], v["adherence_rejected"])
            ),
            "sides",
            breakdown=True,
        ),
    ),
    severity=lambda r: ((1 - r.chosen) if r.chosen is not None else 0) + (r.rejected or 0),
)
