"""Quality judge: correctness, relevance and helpfulness of each answer (1-5), without the
profile. Both answers must clear the bar and score alike: a pair whose answers differ in
general quality would let a reward model win without knowing the user."""

from __future__ import annotations

from pydantic import Field

from pipeline.checks.base import Call, Check
from pipeline.records import QualityScores, Record

SCORES = {k: "int32" for k in ("correctness", "relevance", "helpfulness")}


class Settings(Record):
    min_quality: float = Field(3.5, ge=1, le=5)  # mean of correctness/relevance/helpfulness
    max_quality_gap: float = Field(1.0, ge=0)


class Result(Record):
    chosen: QualityScores | None = None
    rejected: QualityScores | None = None
    gap: float | None = None  # |mean chosen - mean rejected|


def calls(pair) -> list[Call]:
    q = pair.task.question
    return [
        Call("quality_chosen", "judge_quality", {"question": q, "answer": pair.chosen}),
        Call("quality_rejected", "judge_quality", {"question": q, "answer": pair.rejected}),
    ]


def measure(pair, done, _) -> Result:
    r = Result()
    for side in ("chosen", "rejected"):
        if f"quality_{side}" in done:
            setattr(r, side, QualityScores(**done[f"quality_{side}"].value.model_dump()))
    if r.chosen and r.rejected:
        r.gap = round(abs(r.chosen.mean - r.rejected.mean), 4)
    return r


def decide(r: Result, s: Settings) -> list[str]:
    reasons = []
    if r.chosen is not None and r.chosen.mean < s.min_quality:
        reasons.append("quality_low_chosen")
    if r.rejected is not None and r.rejected.mean < s.min_quality:
        reasons.append("quality_low_rejected")
    if r.gap is not None and r.gap > s.max_quality_gap:
        reasons.append("quality_gap")
    return reasons


CHECK = Check(
    name="quality",
    order=10,
    cost=2,
    tasks=("judge_quality",),
    samples={"judge_quality": {"question": "A question?", "answer": "An answer."}},
    settings=Settings,
    result=Result,
    calls=calls,
    call_names=("quality_chosen", "quality_rejected"),
    measure=measure,
    decide=decide,
    about="quality gap",
    docs={
        "min_quality": "each answer's mean judge score (correctness, relevance, helpfulness) ≥",
        "max_quality_gap": "difference between the two answers' mean judge scores ≤",
    },
    features={"quality_gap": "float64"},
    released=lambda r: {"quality_gap": r.gap},
    columns={
        "quality": (
            {"chosen": SCORES, "rejected": SCORES},
            "judge scores 1–5 (correctness, relevance, helpfulness) for each answer",
            lambda r: {
                "chosen": r.chosen.model_dump(exclude={"rationale"}),
                "rejected": r.rejected.model_dump(exclude={"rationale"}),
            },
        )
    },
    frame=lambda r: {
        "quality_chosen": r.chosen.mean if r.chosen else None,
        "quality_rejected": r.rejected.mean if r.rejected else None,
        "quality_gap": r.gap,
    },
    severity=lambda r: 3 * (r.gap or 0),
)
