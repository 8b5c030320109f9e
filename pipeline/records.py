"""Every record that crosses a stage boundary, in one place.

Stage files are JSON Lines of these models; model outputs are parsed into the `*Output` models,
whose JSON schema is also what the prompt files show the model.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from pipeline.errors import PrbError, safe_name


def stable_id(*parts: object, prefix: str = "", n: int = 16) -> str:
    """A content-derived id: the same parts give the same id across runs and machines."""
    canon = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return prefix + hashlib.sha256(canon.encode()).hexdigest()[:n]


def task_id(persona_id: str, question: str) -> str:
    return stable_id(persona_id, question, prefix="t-")


def pair_id(
    persona_id: str, question: str, profile: list[dict], prompt_versions: dict[str, str]
) -> str:
    """Content-derived: the same user (with the same profile), question and prompts give the
    same id; an edited profile gives a new one, so an old pair never passes for a new one."""
    return stable_id(persona_id, question, profile, prompt_versions, prefix="prb-")


def _category(value: str) -> str:
    # categories come from the data; one names a folder (and a config) of the release
    try:
        return safe_name(value, "category")
    except PrbError as e:
        raise ValueError(str(e)) from None


Category = Annotated[str, AfterValidator(_category)]


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
    # kept from imported LaMP-QA / Personalized-RewardBench records, for reference
    narrative: str | None = None
    rubric_aspects: list[RubricAspect] = Field(default_factory=list)


class RankedPost(Record):
    id: str
    score: float


class Task(Record):
    """One persona asking one question: the unit every later stage works on."""

    task_id: str
    persona: Persona
    question_id: str
    question: str
    category: Category
    # the question's own published aspects and narrative (imported users), for rubrics.source
    # imported|both
    imported_aspects: list[RubricAspect] = Field(default_factory=list)
    imported_narrative: str | None = None
    # profile.top_k: every post ranked against the question, best first, and the ids kept
    profile_ranking: list[RankedPost] | None = None
    profile_ids: list[str] | None = None

    @property
    def profile(self) -> list[ProfileItem]:
        """The posts the prompts show: the kept ones in rank order, or the whole profile."""
        if self.profile_ids is None:
            return self.persona.profile
        by_id = {i.id: i for i in self.persona.profile}
        return [by_id[i] for i in self.profile_ids]


# --- model outputs (the schemas in prompts/) --------------------------------------------------


# `json_schema_extra` bounds (maxLength, pattern) go into the schema a grammar enforces (llama.cpp)
# and the prompt shows, not into validation: a strong model is never refused for one long line
def _bound(n: int, **extra: object) -> dict:
    return {"json_schema_extra": {"maxLength": n, **extra}}


# minLength only in the schema (a grammar's bound, not validation: imported aspects may be
# short): under v2 of the planner prompt Qwen2.5-1.5B closed the string after "tone"
AspectText = Annotated[str, Field(min_length=1, **_bound(90, minLength=24))]
Evidence = Annotated[
    str,
    Field(
        min_length=1,
        description="Profile item ids in square brackets, then a short quote.",
        # Anchored both ends: llama.cpp's converter rejects anything else, and its server then
        # falls back, silently, to unconstrained JSON. No `.`: in a grammar it matches `"`
        # too, and the model closed the string early and wrote keys inside it.
        **_bound(120, pattern=r'^\[[^\]"\\]{1,40}\] [^"\\]{1,100}$'),
    ),
]
Reason = Annotated[str, Field(min_length=1, **_bound(120))]


class RubricAspect(Record):
    aspect: AspectText
    evidence: Evidence
    reason: Reason


class PlannerOutput(Record):
    rubric_aspects: list[RubricAspect] = Field(min_length=1, max_length=5)
    narrative: str = Field(min_length=1, **_bound(300))


class ContentPlanOutput(Record):
    key_points: list[str] = Field(min_length=2, max_length=8, json_schema_extra={"maxItems": 5})


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


class TopLogprob(Record):
    token: str
    logprob: float


class YesNoOutput(Record):
    """A one-token yes/no answer read from its logprobs (a task whose params ask for
    `logprobs`): P(yes) among the yes/no tokens the endpoint listed, so a judge is scored
    on each answer alone, with no A/B position to favour."""

    text: str
    top_logprobs: list[TopLogprob] = Field(min_length=1)

    @property
    def p_yes(self) -> float | None:
        """P(yes) / (P(yes) + P(no)) over the listed tokens (any case, spaces stripped); None
        if neither word is among them."""
        mass = {"yes": 0.0, "no": 0.0}
        for t in self.top_logprobs:
            word = t.token.strip().lower()
            if word in mass:
                mass[word] += math.exp(t.logprob)
        total = mass["yes"] + mass["no"]
        return mass["yes"] / total if total > 0 else None


# --- reward-model evaluation (`prb eval`) ------------------------------------------------------


class RMScoreOutput(Record):
    score: float = Field(ge=1, le=10)
    reason: str = ""


class PreferenceOutput(Record):
    choice: Literal["A", "B", "tie"]
    reason: str = ""


POINTS = {"A": 1.0, "tie": 0.5, "B": 0.0}  # a pairwise verdict's points for the answer shown as A


def advantage(ab: str, ba: str) -> float:
    """Chosen's points over both A/B orders, 0-2: `ab` the verdict with chosen shown as A,
    `ba` with chosen shown as B; a win 1, a tie 0.5."""
    return POINTS[ab] + 1.0 - POINTS[ba]


class AspectScore(Record):
    index: int = Field(ge=1)
    score: int = Field(ge=0, le=2)


class OracleOutput(Record):
    scores: list[AspectScore]


class PairScore(Record):
    """One reward model's verdict on one released pair; ties and failed calls are not wins."""

    id: str
    category: str
    score_chosen: float | None
    score_rejected: float | None
    won: bool
    words_chosen: int
    words_rejected: int
    error: str | None = None
    ab: str | None = None  # a pairwise judge's verdict with chosen shown as A
    ba: str | None = None  # ... and with chosen shown as B


class BonPick(Record):
    """One reward model's pick among the N candidates of one prompt, with the oracle's grade."""

    id: str
    category: str
    scores: list[float | None]  # the reward model's, one per candidate
    pick: int
    oracle: list[float]  # every candidate's mean rubric score / 2, in [0, 1]
    win: float  # vs a uniformly random candidate: P(pick graded higher) + P(equal) / 2


# --- the reward server (`prb reward-server`) ---------------------------------------------------


class RewardItem(Record):
    """One response to score for one user: what an RL engine sends `prb reward-server`. The
    user is `profile` (a text, or posts as `{id, text}` or strings); `rubric_aspects` and
    `narrative` are needed only by a reward model whose context is one of those."""

    question: str = Field(min_length=1, max_length=10_000)
    response: str = Field(max_length=50_000)
    profile: str | list[dict | str] = ""
    rubric_aspects: list[dict | str] = Field(default_factory=list)
    narrative: str = ""


class ScoreRequest(Record):
    items: list[RewardItem] = Field(min_length=1)


class ScoreResponse(Record):
    rm: str
    scores: list[float | None]  # None: that item could not be scored (see errors)
    errors: dict[int, str] = Field(default_factory=dict)  # item index -> what went wrong


class DraftProfileItem(Record):
    category: Category
    text: str = Field(min_length=1)


class PersonaDraft(Record):
    """A new persona proposed by `prb personas expand`; ids are assigned by the pipeline."""

    name: str = Field(min_length=1)
    summary: str = Field(min_length=1)
    profile: list[DraftProfileItem] = Field(min_length=5, max_length=8)
    preferences: list[Preference] = Field(min_length=3, max_length=9)
    narrative: str = Field(min_length=1)


# --- stage records ----------------------------------------------------------------------------


class BatchJob(Record):
    """One line of `batches.jsonl`: a Batch API job, written when submitted (before any
    polling, so a rerun collects it instead of paying again) and again when collected."""

    batch_id: str
    input_file_id: str
    input_path: str  # the local copy of the uploaded JSONL, relative to the run dir
    requests: int
    state: Literal["submitted", "collected"]
    status: str = ""  # the API's final status, once collected


class Difference(Record):
    """One dimension on which a rewrite pair's two users differ (generation.design: rewrite):
    each side's level, and whether the text shows it (None: not visible model-free)."""

    dimension: str
    chosen: str
    rejected: str
    realised: bool | None


class Dropped(Record):
    """A record that could not go on, kept with its reason so nothing vanishes silently."""

    stage: str
    id: str
    reason: str
    detail: str = ""
    # difference_not_realised (generation.design: rewrite): what the couple was to differ on,
    # none of it shown, so a build can say which dimensions its generator realises
    differences: list[Difference] = []


class AspectAgreement(Record):
    """rubrics.source both: how many of the user's imported aspects the planner found too."""

    found: int
    of: int
    matches: list[int | None]  # per imported aspect: the planner aspect (1-based) it matched


class RubricRecord(Record):
    task: Task
    rubric_aspects: list[RubricAspect]
    narrative: str
    ungrounded_aspects: list[RubricAspect] = Field(default_factory=list)  # removed: no evidence
    generic_aspects: list[RubricAspect] = Field(default_factory=list)  # removed: not this user's
    calls: dict[str, str] = Field(default_factory=dict)  # call name -> response-cache key
    source: Literal["planner", "imported", "both", "stated"] = "planner"
    planner_aspects: list[RubricAspect] = Field(default_factory=list)  # source both: beside
    agreement: AspectAgreement | None = None


class Rewritten(Record):
    """The artifact gate's rewrite (pipeline/stages/pairs.py): the rejected answer it replaced
    with the chosen prompt's answer for the user's swap partner (`persona_swap`)."""

    strategy: str  # the replaced answer's strategy
    rejected: str  # the replaced answer
    probability: float | None  # its out-of-fold P(chosen), answers only
    round: int | None = None  # the AFLite round that picked it; None: its couple was picked


class Pair(Record):
    pair_id: str
    task: Task
    rubric_aspects: list[RubricAspect]
    narrative: str
    key_points: list[str]
    chosen: str
    rejected: str
    rejected_strategy: str
    # persona_swap: the user the rejected answer was written for (a contrasting user)
    rejected_for: str | None = None
    generator_model: str
    prompt_versions: dict[str, str]
    calls: dict[str, str] = Field(default_factory=dict)
    rewritten: Rewritten | None = None  # the artifact gate replaced the first rejected answer
    differences: list[Difference] = Field(default_factory=list)  # the rewrite design's


class QualityScores(QualityOutput):
    @property
    def mean(self) -> float:
        return (self.correctness + self.relevance + self.helpfulness) / 3


class FilterRecord(Record):
    """A pair through the filters stage, kept or not. `checks` holds each check's result by
    check name, as that check records it (pipeline/checks/); a check the pair was dropped before
    is listed in `skipped` (unless `filters.evaluate_all`, every check runs on every pair)."""

    pair: Pair
    checks: dict[str, dict]
    judge_model: str
    kept: bool
    reasons: list[str] = Field(default_factory=list)
    flags: list[str] = Field(default_factory=list)  # warnings that did not drop the pair
    errors: dict[str, str] = Field(default_factory=dict)  # failed judge call -> what went wrong
    calls: dict[str, str] = Field(default_factory=dict)
    skipped: list[str] = Field(default_factory=list)  # checks not run: dropped before them
    # filters.mode record: the reasons it would have been dropped for (it is kept)
    would_drop: list[str] = Field(default_factory=list)


class AnnotationRecord(Record):
    pair_id: str
    verdict: Literal["confirmed", "refuted", "unlabelled", "insufficient"]
    n_labels: int = 0
    chosen_votes: int = 0
    rejected_votes: int = 0
    tie_votes: int = 0


ItemKind = Literal["pair", "repeat", "gold_identical", "gold_offtopic"]
Side = Literal["chosen", "rejected", "tie"]


class AnnotationKeyItem(Record):
    """The private un-blinding key of one exported item; never shown to annotators."""

    item_id: str
    batch_id: str
    pair_id: str
    kind: ItemKind
    a_is: Literal["chosen", "rejected"]  # which answer is shown as A ("chosen" = expected winner)
    expected: Side | None = None  # gold items only
    repeat_of: str | None = None  # repeat items: the item they repeat (A/B swapped)
    offtopic_from: str | None = None  # gold_offtopic: the pair whose answer is the wrong one


class AnnotationKey(Record):
    """The private key file of one export: seed, batch assignments and every item's key."""

    run_id: str
    export_id: str = ""  # random per export, carried by every exported file and item
    seed: int
    assignments: dict[str, list[str]]  # batch id -> annotator ids
    items: list[AnnotationKeyItem]


class AnnotationLabel(Record):
    """One imported human label, un-blinded: A/B as shown, and chosen/rejected behind them."""

    item_id: str
    batch_id: str
    pair_id: str
    kind: ItemKind
    annotator_id: str
    labelled_at: str | None = None  # as given by the tool (ISO 8601) if it gives one
    imported_at: str
    source: str  # file name and format it came from
    preference: str  # as labelled, e.g. "A_slightly_better"
    side: Side  # the preferred answer behind A/B
    strength: Literal["much", "slightly", "none"]
    scores_chosen: dict[str, int]  # correct / relevant / helpful, 1-5
    scores_rejected: dict[str, int]
    reason: str = ""
