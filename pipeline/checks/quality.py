"""Quality judge: correctness, relevance and helpfulness of each answer (1-5), without the
profile. Both answers must clear the bar and score alike: a pair whose answers differ in
general quality would let a reward model win without knowing the user."""

from __future__ import annotations

import statistics
from typing import Annotated

from pydantic import Field

from pipeline.checks.base import Ask, Check, Figure, Released, Report
from pipeline.records import QualityScores, Record

SCORES = {k: "int32" for k in ("correctness", "relevance", "helpfulness")}


class Settings(Record):
    min_quality: float = Field(3.5, ge=1, le=5)  # mean of correctness/relevance/helpfulness
    max_quality_gap: float = Field(1.0, ge=0)


class Result(Record):
    chosen: QualityScores | None = None
    rejected: QualityScores | None = None
    gap: Annotated[float | None, Released("quality_gap")] = None  # |mean chosen - mean rejected|


def ask(side: str) -> Ask:
    return Ask(
        f"quality_{side}",
        "judge_quality",
        lambda pair, _: {"question": pair.task.question, "answer": getattr(pair, side)},
    )


def measure(pair, done, _) -> Result:
    r = Result()
    for side in ("chosen", "rejected"):
        if f"quality_{side}" in done:
            setattr(r, side, QualityScores(**done[f"quality_{side}"].value.model_dump()))
    if r.chosen and r.rejected:
        r.gap = round(abs(r.chosen.mean - r.rejected.mean), 4)
    return r


def sides(criterion: str):
    """A released pair's judge score for each answer: one criterion, or their mean."""

    def value(view: dict) -> tuple[float, float] | None:
        q = view.get("quality") or {}
        scores = [q.get(side) for side in ("chosen", "rejected")]
        if not all(isinstance(s, dict) for s in scores):
            return None
        picked = [
            [s.get(c) for c in SCORES] if criterion == "mean" else [s.get(criterion)]
            for s in scores
        ]
        if any(x is None for xs in picked for x in xs):
            return None
        return statistics.fmean(picked[0]), statistics.fmean(picked[1])

    return value


def gap(view: dict) -> float | None:
    both = sides("mean")(view)
    return None if both is None else both[0] - both[1]


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
    asks=(ask("chosen"), ask("rejected")),
    samples={"judge_quality": {"question": "A question?", "answer": "An answer."}},
    settings=Settings,
    result=Result,
    measure=measure,
    decide=decide,
    report=Report(
        about="quality gap",
        docs={
            "min_quality": "each answer's mean judge score (correctness, relevance, helpfulness) ≥",
            "max_quality_gap": "difference between the two answers' mean judge scores ≤",
        },
        columns={
            "quality": (
                {"chosen": SCORES, "rejected": SCORES},
                "judge scores 1–5 (correctness, relevance, helpfulness) for each answer",
                lambda r: {
                    side: s.model_dump(exclude={"rationale"}) if (s := getattr(r, side)) else None
                    for side in ("chosen", "rejected")
                },
            )
        },
        figures=(
            Figure(
                "quality",
                "judge score, mean of three (1–5)",
                sides("mean"),
                "sides",
                span=(0.75, 5.25),
            ),
            *(
                Figure(f"quality_{c}", f"{c} (1–5)", sides(c), "sides", span=(0.75, 5.25))
                for c in SCORES
            ),
            Figure(
                "quality_gap",
                "quality gap, chosen − rejected (1–5)",
                gap,
                fmt="{:+.3f}",
                plot=False,
                breakdown=True,
            ),
        ),
        severity=lambda r: 3 * (r.gap or 0),
    ),
)
