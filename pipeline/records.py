"""Every record that crosses a stage boundary, in one place.

Stage files are JSON Lines of these models; model outputs are parsed into the `*Output` models,
whose JSON schema is also what the prompt files show the model.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CATEGORIES: tuple[str, ...] = (
    "Art_and_Entertainment",
    "Lifestyle_and_Personal_Development",
    "Society_and_Culture",
)
Category = Literal[
    "Art_and_Entertainment",
    "Lifestyle_and_Personal_Development",
    "Society_and_Culture",
]


def stable_id(*parts: object, prefix: str = "", n: int = 16) -> str:
    """A content-derived id: the same parts give the same id across runs and machines."""
    canon = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return prefix + hashlib.sha256(canon.encode()).hexdigest()[:n]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- personas and questions -------------------------------------------------------------------


class ProfileItem(Record):
    id: str = Field(min_length=1)
    category: str
    text: str = Field(min_length=1)


class Preference(Record):
    dimension: str
    level: str
    statement: str = Field(min_length=1)


class Persona(Record):
    persona_id: str = Field(min_length=1)
    category: Category
    name: str = ""
    summary: str = ""
    profile: list[ProfileItem] = Field(min_length=1)
    preferences: list[Preference] = Field(default_factory=list)
    narrative: str | None = None
    source: str = "library"


class Question(Record):
    question_id: str = Field(min_length=1)
    category: Category
    question: str = Field(min_length=1)
    asked_by: list[str] = Field(default_factory=list)


class Task(Record):
    """One persona asking one question: the unit every later stage works on."""

    task_id: str
    persona: Persona
    question_id: str
    question: str
    category: Category


# --- model outputs (the schemas in prompts/) --------------------------------------------------


class RubricAspect(Record):
    aspect: str = Field(min_length=1)
    evidence: str = Field(min_length=1, description="Profile item ids and/or a short quote.")
    reason: str = Field(min_length=1)


class PlannerOutput(Record):
    rubric_aspects: list[RubricAspect] = Field(min_length=1, max_length=8)
    narrative: str = Field(min_length=1)


class ContentPlanOutput(Record):
    key_points: list[str] = Field(min_length=2, max_length=8)


class QualityOutput(Record):
    correctness: int = Field(ge=1, le=5)
    relevance: int = Field(ge=1, le=5)
    helpfulness: int = Field(ge=1, le=5)
    rationale: str = ""


class AspectCheck(Record):
    index: int = Field(ge=1)
    satisfied: bool


class AdherenceOutput(Record):
    checks: list[AspectCheck]


class BlindOutput(Record):
    choice: Literal["A", "B", "tie"]
    reason: str = ""


# --- stage records ----------------------------------------------------------------------------


class Dropped(Record):
    """A record that could not go on, kept with its reason so nothing vanishes silently."""

    stage: str
    id: str
    reason: str
    detail: str = ""


class RubricRecord(Record):
    task: Task
    rubric_aspects: list[RubricAspect]
    narrative: str
    calls: dict[str, str] = Field(default_factory=dict)  # call name -> response-cache key


class Pair(Record):
    pair_id: str
    task: Task
    rubric_aspects: list[RubricAspect]
    narrative: str
    key_points: list[str]
    chosen: str
    rejected: str
    rejected_strategy: str
    generator_model: str
    prompt_versions: dict[str, str]
    calls: dict[str, str] = Field(default_factory=dict)


class QualityScores(QualityOutput):
    @property
    def mean(self) -> float:
        return (self.correctness + self.relevance + self.helpfulness) / 3


class BlindCheck(Record):
    ab: str  # verdict with chosen shown as A
    ba: str  # verdict with chosen shown as B
    picked: Literal["chosen", "rejected", "none"]  # consistent pick over both orders


class PairChecks(Record):
    quality_chosen: QualityScores | None = None
    quality_rejected: QualityScores | None = None
    quality_gap: float | None = None
    adherence_chosen: float | None = None  # fraction of aspects satisfied
    adherence_rejected: float | None = None
    blind: BlindCheck | None = None
    length_ratio: float | None = None  # rejected words / chosen words
    answer_similarity: float | None = None
    duplicate_of: str | None = None


class FilterRecord(Record):
    pair: Pair
    checks: PairChecks
    judge_model: str
    kept: bool
    reasons: list[str] = Field(default_factory=list)
    calls: dict[str, str] = Field(default_factory=dict)


class AnnotationRecord(Record):
    pair_id: str
    verdict: Literal["confirmed", "refuted", "unlabelled", "insufficient"]
    n_labels: int = 0
    chosen_votes: int = 0
    rejected_votes: int = 0
    tie_votes: int = 0
