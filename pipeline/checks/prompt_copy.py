"""Copying the prompt's data, model-free (issue 26's quality floor): an answer whose words are
largely lifted, verbatim, from what the generation prompt showed — the rubric aspects and their
evidence, the key points, the narrative, the profile's posts. A weak model copies its input
instead of answering (the bundled 135M model wrote its aspects line by line); such an answer is
not one a user would get, and what it copied can separate chosen from rejected on its own.

An answer is measured by the share of its words inside a run of 8 words that also occurs in
the prompt's data, twice: in the user's data (aspects, evidence, narrative, posts), which an
answer should use but not recite, and in the plan's key points, which a sound answer is built
from (the simulator states them verbatim) but is not made of alone. (The prompt's markup
itself, `<key_points>` and the like, is text_sanity's.)"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from pipeline.checks.base import Check, Figure, Released, Report, both
from pipeline.records import Pair, Record
from pipeline.stats import words
from pipeline.text import runs

N = 8  # words in a copied run: shorter runs are shared by any two texts on one topic


class Settings(Record):
    max_copied_user: float = Field(0.5, gt=0, le=1)
    max_copied_plan: float = Field(0.9, gt=0, le=1)
    drop_prompt_copy: bool = True


class Result(Record):
    # share of the answer's words in runs copied from the user's data / from the key points
    chosen_copied: Annotated[float, Released(dtype="float32")]
    rejected_copied: Annotated[float, Released(dtype="float32")]
    chosen_copied_plan: Annotated[float, Released(dtype="float32")] = 0.0
    rejected_copied_plan: Annotated[float, Released(dtype="float32")] = 0.0


def user_data(pair: Pair) -> list[str]:
    """What the generation prompts show of the user."""
    aspects = [f"{a.aspect}. {a.evidence}" for a in pair.rubric_aspects]
    return [*aspects, pair.narrative, *(p.text for p in pair.task.profile)]


def grams(text: str) -> set[tuple[str, ...]]:
    return runs(text, N)


def copied(answer: str, seen: set[tuple[str, ...]]) -> float:
    w = [x.lower() for x in words(answer)]
    hit = [False] * len(w)
    for i in range(len(w) - N + 1):
        if tuple(w[i : i + N]) in seen:
            hit[i : i + N] = [True] * N
    return round(sum(hit) / len(w), 4) if w else 0.0


def measure(pair: Pair, _: object, __: object) -> Result:
    user = set().union(*map(grams, user_data(pair)))
    plan = set().union(*map(grams, pair.key_points))
    return Result(
        chosen_copied=copied(pair.chosen, user),
        rejected_copied=copied(pair.rejected, user),
        chosen_copied_plan=copied(pair.chosen, plan),
        rejected_copied_plan=copied(pair.rejected, plan),
    )


def decide(r: Result, s: Settings) -> list[str]:
    user = max(r.chosen_copied, r.rejected_copied) > s.max_copied_user
    plan = max(r.chosen_copied_plan, r.rejected_copied_plan) > s.max_copied_plan
    return ["prompt_copy"] if s.drop_prompt_copy and (user or plan) else []


CHECK = Check(
    name="prompt_copy",
    floor=True,
    order=35,
    settings=Settings,
    result=Result,
    measure=measure,
    decide=decide,
    report=Report(
        about=f"each answer's share of words in runs of {N}+ words copied verbatim from the "
        "user's data in the prompt (aspects, narrative, profile posts), and from the key points",
        docs={
            "max_copied_user": f"largest share of an answer's words in {N}-word runs copied "
            "verbatim from the user's data (aspects, their evidence, narrative, profile posts):",
            "max_copied_plan": f"largest share of an answer's words in {N}-word runs copied "
            "verbatim from the key points:",
            "drop_prompt_copy": "drop a pair where an answer copies more than either",
        },
        figures=(
            Figure(
                "prompt_copy",
                "share of words copied from the prompt's data",
                both("chosen_copied", "rejected_copied"),
                "sides",
                span=(0.0, 1.0),
            ),
        ),
        severity=lambda r: (
            3.0
            * max(r.chosen_copied, r.rejected_copied, r.chosen_copied_plan, r.rejected_copied_plan)
        ),
    ),
)
