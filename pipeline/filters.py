"""Stage 5 — filters: keep a pair only if both answers are good and only personal fit separates
them. Every pair is written to filters.jsonl, kept or not, with every score and every reason.

Checks (thresholds in `filters:` of the config):
- quality judge, per answer: correctness/relevance/helpfulness; both clear the bar, small gap;
- rubric adherence, per answer and aspect: chosen satisfies, rejected does not;
- persona-blind judge, both A/B orders: if it picks the chosen answer in both without the
  profile, the pair leaks general quality;
- length ratio, answer near-duplicates, near-duplicate questions of the same persona.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from rapidfuzz import fuzz

from pipeline.config import FilterConfig, RunConfig
from pipeline.llm import LLM, LLMError
from pipeline.prompts import load_prompt
from pipeline.records import BlindCheck, FilterRecord, Pair, PairChecks, QualityScores
from pipeline.store import StageFile, process_stage

STAGE = "filters"
QUESTION_DUP_THRESHOLD = 90  # rapidfuzz token_set_ratio


def words(text: str) -> int:
    return len(text.split())


def duplicate_questions(pairs: list[Pair]) -> dict[str, str]:
    """pair_id -> the pair it duplicates: same persona, near-identical question; first id wins."""
    dup: dict[str, str] = {}
    by_persona: dict[str, list[Pair]] = {}
    for p in sorted(pairs, key=lambda p: p.pair_id):
        seen = by_persona.setdefault(p.task.persona.persona_id, [])
        for q in seen:
            if fuzz.token_set_ratio(p.task.question, q.task.question) >= QUESTION_DUP_THRESHOLD:
                dup[p.pair_id] = q.pair_id
                break
        else:
            seen.append(p)
    return dup


def blind_pick(ab: str, ba: str) -> str:
    if ab == "A" and ba == "B":
        return "chosen"
    if ab == "B" and ba == "A":
        return "rejected"
    return "none"


def decide(checks: PairChecks, t: FilterConfig) -> list[str]:
    """The reasons a pair is dropped; empty means kept."""
    reasons = []
    qc, qr = checks.quality_chosen, checks.quality_rejected
    if qc.mean < t.min_quality:
        reasons.append("quality_low_chosen")
    if qr.mean < t.min_quality:
        reasons.append("quality_low_rejected")
    if checks.quality_gap > t.max_quality_gap:
        reasons.append("quality_gap")
    if checks.adherence_chosen < t.min_adherence_chosen:
        reasons.append("chosen_not_adherent")
    if checks.adherence_rejected > t.max_adherence_rejected:
        reasons.append("rejected_adherent")
    if t.drop_blind_separated and checks.blind.picked != "none":
        reasons.append("blind_separated")
    if not t.min_length_ratio <= checks.length_ratio <= t.max_length_ratio:
        reasons.append("length_ratio")
    if checks.answer_similarity > t.max_answer_similarity:
        reasons.append("answers_near_duplicate")
    if checks.duplicate_of:
        reasons.append("near_duplicate_question")
    return reasons


async def run(cfg: RunConfig, llm: LLM, run_dir: Path, pairs: list[Pair]) -> dict[str, int]:
    quality, adherence, blind = (
        load_prompt(t) for t in ("judge_quality", "judge_adherence", "judge_blind")
    )
    judge = cfg.model.judge
    dups = duplicate_questions(pairs)

    async def check(pair: Pair) -> FilterRecord:
        q = pair.task.question
        aspects = [a.model_dump() for a in pair.rubric_aspects]
        checks = PairChecks(
            length_ratio=round(words(pair.rejected) / max(1, words(pair.chosen)), 4),
            answer_similarity=round(fuzz.ratio(pair.chosen, pair.rejected) / 100, 4),
            duplicate_of=dups.get(pair.pair_id),
        )

        def call(prompt, **variables):
            return llm.call(
                prompt, stage=STAGE, model=judge, variables={"question": q, **variables}
            )

        try:
            qc, qr, ac, ar, ab, ba = await asyncio.gather(
                call(quality, answer=pair.chosen),
                call(quality, answer=pair.rejected),
                call(adherence, aspects=aspects, answer=pair.chosen),
                call(adherence, aspects=aspects, answer=pair.rejected),
                call(blind, answer_a=pair.chosen, answer_b=pair.rejected),
                call(blind, answer_a=pair.rejected, answer_b=pair.chosen),
            )
        except LLMError as e:
            return FilterRecord(
                pair=pair,
                checks=checks,
                judge_model=judge,
                kept=False,
                reasons=[f"judge_{e.kind}"],
            )
        n = len(aspects)

        def adherence_rate(result) -> float:
            satisfied = {c.index for c in result.value.checks if c.satisfied and c.index <= n}
            return round(len(satisfied) / n, 4)

        checks.quality_chosen = QualityScores(**qc.value.model_dump())
        checks.quality_rejected = QualityScores(**qr.value.model_dump())
        checks.quality_gap = round(
            abs(checks.quality_chosen.mean - checks.quality_rejected.mean), 4
        )
        checks.adherence_chosen = adherence_rate(ac)
        checks.adherence_rejected = adherence_rate(ar)
        checks.blind = BlindCheck(
            ab=ab.value.choice,
            ba=ba.value.choice,
            picked=blind_pick(ab.value.choice, ba.value.choice),
        )
        reasons = decide(checks, cfg.filters)
        return FilterRecord(
            pair=pair,
            checks=checks,
            judge_model=judge,
            kept=not reasons,
            reasons=reasons,
            calls={
                "quality_chosen": qc.key,
                "quality_rejected": qr.key,
                "adherence_chosen": ac.key,
                "adherence_rejected": ar.key,
                "blind_ab": ab.key,
                "blind_ba": ba.key,
            },
        )

    return await process_stage(
        STAGE,
        pairs,
        input_id=lambda p: p.pair_id,
        out=StageFile(run_dir, STAGE, FilterRecord),
        output_id=lambda r: r.pair.pair_id,
        run_dir=run_dir,
        fn=check,
    )
