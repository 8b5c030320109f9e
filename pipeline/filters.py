"""Stage 5 — filters: keep a pair only if both answers are good and only personal fit separates
them. Every pair is written to filters.jsonl, kept or not, with every score and every reason.

Checks (every threshold lives in `filters:` of the config):
- quality judge, per answer: correctness/relevance/helpfulness; both clear the bar, small gap;
- rubric adherence, per answer and per aspect: chosen satisfies them, rejected does not;
- persona-blind judge, asked in both A/B orders: if it picks the same answer in both without
  seeing the profile, the pair leaks general quality (flagged, and dropped unless configured);
- length ratio, answer near-duplicates, near-duplicate questions of the same persona.

A judge call that still fails after llm.py's retries (e.g. unparseable output) drops the pair
with reason `judge_<kind>`; the checks that did succeed are still recorded. A permanent endpoint
error (bad key, unknown model) stops the run instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from rapidfuzz import fuzz

from pipeline.config import FilterConfig, RunConfig
from pipeline.errors import is_transient
from pipeline.llm import LLM, CallResult, LLMError, PermanentLLMError
from pipeline.prompts import load_prompt
from pipeline.records import BlindCheck, FilterRecord, Pair, PairChecks, QualityScores
from pipeline.store import StageFile, process_stage

STAGE = "filters"
OUTPUT = FilterRecord
JUDGES = ("judge_quality", "judge_adherence", "judge_blind")


def input_id(pair: Pair) -> str:
    return pair.pair_id


def output_id(record: FilterRecord) -> str:
    return record.pair.pair_id


def unsettled(record: FilterRecord) -> bool:
    """A judge call that ran out of retries on a flaky endpoint: judge the pair again on resume."""
    return any(is_transient(r) for r in record.reasons)


def words(text: str) -> int:
    return len(text.split())


def duplicate_questions(pairs: Iterable[Pair], threshold: float) -> dict[str, str]:
    """pair_id -> the pair it duplicates: same persona, near-identical question; first id wins.
    (The same question asked by different personas is the point of the benchmark, not a dup.)
    Keeps ids and questions only, so `pairs` can stream from a stage file."""
    dup: dict[str, str] = {}
    by_persona: dict[str, list[tuple[str, str]]] = {}
    for pair_id, persona_id, question in sorted(
        (p.pair_id, p.task.persona.persona_id, p.task.question) for p in pairs
    ):
        seen = by_persona.setdefault(persona_id, [])
        for other_id, other in seen:
            if fuzz.token_set_ratio(question, other) >= 100 * threshold:
                dup[pair_id] = other_id
                break
        else:
            seen.append((pair_id, question))
    return dup


def blind_pick(ab: str, ba: str) -> str:
    """ab: verdict with chosen shown as A; ba: with chosen shown as B. Only a pick that survives
    the swap counts; the same letter twice is position bias, not a preference."""
    if ab == "A" and ba == "B":
        return "chosen"
    if ab == "B" and ba == "A":
        return "rejected"
    return "none"


def decide(checks: PairChecks, t: FilterConfig) -> list[str]:
    """The reasons a pair is dropped; empty means kept. Checks left empty by a failed judge
    call are skipped here: the failure itself is the reason."""
    reasons = []
    qc, qr = checks.quality_chosen, checks.quality_rejected
    if qc is not None and qc.mean < t.min_quality:
        reasons.append("quality_low_chosen")
    if qr is not None and qr.mean < t.min_quality:
        reasons.append("quality_low_rejected")
    if checks.quality_gap is not None and checks.quality_gap > t.max_quality_gap:
        reasons.append("quality_gap")
    if checks.adherence_chosen is not None and checks.adherence_chosen < t.min_adherence_chosen:
        reasons.append("chosen_not_adherent")
    if (
        checks.adherence_rejected is not None
        and checks.adherence_rejected > t.max_adherence_rejected
    ):
        reasons.append("rejected_adherent")
    if t.drop_blind_separated and checks.blind is not None and checks.blind.picked != "none":
        reasons.append("blind_separated")
    if not t.min_length_ratio <= checks.length_ratio <= t.max_length_ratio:
        reasons.append("length_ratio")
    if checks.answer_similarity > t.max_answer_similarity:
        reasons.append("answers_near_duplicate")
    if checks.duplicate_of:
        reasons.append("near_duplicate_question")
    return reasons


def flags_for(checks: PairChecks) -> list[str]:
    """Warnings recorded on the pair whether or not they drop it."""
    flags = []
    if checks.blind is not None:
        if checks.blind.picked != "none":
            flags.append("blind_separated")  # leaks general quality
        elif checks.blind.ab == checks.blind.ba != "tie":
            flags.append("blind_position_bias")
    return flags


def per_aspect(result: CallResult, n: int) -> list[bool]:
    """Satisfied flags in rubric order; an aspect the judge left out counts as not satisfied."""
    satisfied = {c.index for c in result.value.checks if c.satisfied}
    return [i in satisfied for i in range(1, n + 1)]


def fill_judged(checks: PairChecks, done: dict[str, CallResult], n_aspects: int) -> None:
    if "quality_chosen" in done:
        checks.quality_chosen = QualityScores(**done["quality_chosen"].value.model_dump())
    if "quality_rejected" in done:
        checks.quality_rejected = QualityScores(**done["quality_rejected"].value.model_dump())
    if checks.quality_chosen and checks.quality_rejected:
        gap = checks.quality_chosen.mean - checks.quality_rejected.mean
        checks.quality_gap = round(abs(gap), 4)
    for side in ("chosen", "rejected"):
        if f"adherence_{side}" in done:
            flags = per_aspect(done[f"adherence_{side}"], n_aspects)
            setattr(checks, f"aspects_{side}", flags)
            setattr(checks, f"adherence_{side}", round(sum(flags) / n_aspects, 4))
    if "blind_ab" in done and "blind_ba" in done:
        ab, ba = done["blind_ab"].value.choice, done["blind_ba"].value.choice
        checks.blind = BlindCheck(ab=ab, ba=ba, picked=blind_pick(ab, ba))


async def run(cfg: RunConfig, llm: LLM, run_dir: Path, pairs: Iterable[Pair]) -> dict[str, int]:
    quality, adherence, blind = (load_prompt(t) for t in JUDGES)
    judge = cfg.model.judge
    dups = duplicate_questions(pairs, cfg.filters.max_question_similarity)

    async def check(pair: Pair) -> FilterRecord:
        aspects = [a.model_dump() for a in pair.rubric_aspects]
        checks = PairChecks(
            length_ratio=round(words(pair.rejected) / max(1, words(pair.chosen)), 4),
            answer_similarity=round(fuzz.ratio(pair.chosen, pair.rejected) / 100, 4),
            duplicate_of=dups.get(pair.pair_id),
        )
        # quality and adherence see one answer at a time; the blind judge sees both, twice
        planned = {
            "quality_chosen": (quality, {"answer": pair.chosen}),
            "quality_rejected": (quality, {"answer": pair.rejected}),
            "adherence_chosen": (adherence, {"aspects": aspects, "answer": pair.chosen}),
            "adherence_rejected": (adherence, {"aspects": aspects, "answer": pair.rejected}),
            "blind_ab": (blind, {"answer_a": pair.chosen, "answer_b": pair.rejected}),
            "blind_ba": (blind, {"answer_a": pair.rejected, "answer_b": pair.chosen}),
        }
        results = await asyncio.gather(
            *(
                llm.call(
                    prompt,
                    stage=STAGE,
                    model=judge,
                    variables={"question": pair.task.question, **variables},
                )
                for prompt, variables in planned.values()
            ),
            return_exceptions=True,
        )
        done: dict[str, CallResult] = {}
        errors: dict[str, LLMError] = {}
        for name, result in zip(planned, results, strict=True):
            if isinstance(result, PermanentLLMError) or not isinstance(
                result, (CallResult, LLMError)
            ):
                raise result
            if isinstance(result, LLMError):
                errors[name] = result
            else:
                done[name] = result
        fill_judged(checks, done, len(aspects))
        reasons = decide(checks, cfg.filters)
        reasons += sorted({f"judge_{e.kind}" for e in errors.values()})
        return FilterRecord(
            pair=pair,
            checks=checks,
            judge_model=judge,
            kept=not reasons,
            reasons=reasons,
            flags=flags_for(checks),
            errors={name: f"{e.kind}: {e.detail}" for name, e in errors.items()},
            calls={name: r.key for name, r in done.items()},
        )

    return await process_stage(
        STAGE,
        pairs,
        input_id=input_id,
        out=StageFile(run_dir, STAGE, OUTPUT),
        output_id=output_id,
        run_dir=run_dir,
        fn=check,
        unsettled=unsettled,
    )
