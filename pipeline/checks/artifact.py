"""Artifact gate, model-free and run-level: the answer-only classifier (pipeline/crossfit.py),
cross-fitted over the run's pairs with folds grouped by user, and the pairs it
picks `chosen` in confidently are dropped, in rounds, in the manner of AFLite (adversarial
filtering: Sakaguchi et al. 2020; Le Bras et al. 2020). Each round refits on the pairs left, so
an artifact a few pairs share is learnt and removed while personal fit, which no answer-only
model can read, is kept. It runs with the other model-free checks, before any judge: a dropped
pair costs no judge call. Its first half runs at the end of the pairs stage, which has a leaking
pair's rejected answer rewritten by persona_swap rather than dropped (pipeline/stages/pairs.py).

Every pair records its out-of-fold probability (of the last round it was scored in) and, if
dropped, the round. Deterministic for a run's pairs and seed, so a resumed run decides alike.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from pipeline.checks.base import Check, Figure, Released, Report
from pipeline.crossfit import Features, out_of_fold
from pipeline.records import Record


class Settings(Record):
    artifact_confidence: float = Field(0.75, gt=0.5, le=1)
    artifact_max_drop: float = Field(0.25, ge=0, le=1)
    artifact_rounds: int = Field(6, ge=1)
    artifact_min_pairs: int = Field(100, ge=10)
    artifact_gate: bool = True


class Result(Record):
    # out-of-fold P(chosen is chosen), answers only
    probability: Annotated[float | None, Released("artifact_probability")] = None
    round: Annotated[int | None, Released("artifact_round")] = None  # the round that dropped it
    removed: bool = False
    # the pairs stage's rewrite: the strategy of the first rejected answer, and its probability
    rewritten_from: Annotated[str | None, Released("artifact_rewritten_from")] = None
    rewritten_probability: float | None = None


def row(pair, texts: dict[str, str]) -> dict:
    """The classifier's row of a pair, each answer text held once (`texts`, shared by the rows
    of a run) however many pairs use it: persona_swap uses each twice, chosen for its user and
    rejected for another."""
    return {
        "id": pair.pair_id,
        "chosen": texts.setdefault(pair.chosen, pair.chosen),
        "rejected": texts.setdefault(pair.rejected, pair.rejected),
        "user": pair.task.persona.persona_id,
        "rejected_for": pair.rejected_for,
    }


def aflite(rows: list[dict], cfg, *, max_drop: float, every: bool = False) -> list[Result]:
    """AFLite over rows (id, chosen, rejected, user, rejected_for): one result per row. Each round
    takes at most a tenth of what is left (the next fit shows what the rest leaks), or, with
    `every` (the pairs stage's rewrite, which loses no pair), every confident pair."""
    features = Features(rows)  # once: every round scores a subset of the same answers
    found = [Result() for _ in rows]
    # by id, not file order: a stage file's order changes when a line is superseded, and the
    # folds (shuffled by seed) must not, or a resumed run would decide otherwise
    alive = sorted(range(len(rows)), key=lambda i: rows[i]["id"])
    budget = int(max_drop * len(rows))
    for round_ in range(1, cfg.artifact_rounds + 1):
        probs = out_of_fold(
            [rows[i] for i in alive], lambda r: r["user"], round_, features=features.take(alive)
        )
        if probs is None:
            break
        for i, p in zip(alive, probs, strict=True):
            found[i].probability = round(p, 4)
        # one side only: dropping the pairs it reads backwards too was measured to drop 16%
        # of a clean persona_swap build (its folds misread couples), against 3% this way
        confident = sorted(
            ((p, i) for i, p in zip(alive, probs, strict=True) if p >= cfg.artifact_confidence),
            reverse=True,
        )
        take = confident[: min(budget, len(alive) if every else max(1, len(alive) // 10))]
        if not take:
            break
        for _, i in take:
            found[i].round, found[i].removed = round_, True
        budget -= len(take)
        gone = {i for _, i in take}
        alive = [i for i in alive if i not in gone]
    return found


def prepare(pairs, cfg) -> dict[str, Result]:
    """AFLite over all the run's pairs: pair id -> its result."""
    texts: dict[str, str] = {}
    rows = [row(p, texts) for p in pairs]  # one pass over the stage file: texts and ids only
    del texts
    if not cfg.artifact_gate or len(rows) < cfg.artifact_min_pairs:
        return {r["id"]: Result() for r in rows}
    found = aflite(rows, cfg, max_drop=cfg.artifact_max_drop)
    return {r["id"]: f for r, f in zip(rows, found, strict=True)}


CHECK = Check(
    name="artifact",
    order=20,
    settings=Settings,
    result=Result,
    prepare=prepare,
    enabled=lambda s: s.artifact_gate,
    measure=lambda pair, _, found: found[pair.pair_id].model_copy(
        update={
            "rewritten_from": pair.rewritten.strategy if pair.rewritten else None,
            "rewritten_probability": pair.rewritten.probability if pair.rewritten else None,
        }
    ),
    decide=lambda r, s: ["artifact"] if r.removed else [],
    report=Report(
        about="the answer-only classifier's out-of-fold probability that chosen is chosen "
        "(AFLite-style artifact gate), the round that dropped the pair, and the strategy of the "
        "first rejected answer when the gate had it rewritten by persona_swap",
        docs={
            "artifact_confidence": "drop a pair the answer-only classifier (cross-fitted, folds "
            "by user) picks chosen in with at least this probability:",
            "artifact_max_drop": "the gate drops at most this share of the run's pairs:",
            "artifact_rounds": "rounds of refitting on the pairs left (AFLite):",
            "artifact_min_pairs": "the gate runs on runs of at least this many pairs:",
            "artifact_gate": "run the artifact gate before the judges (and, with "
            "`generation.rewrite_artifacts`, rewrite a leaking rejected answer by persona_swap)",
        },
        figures=(
            Figure(
                "artifact_probability",
                "answer-only P(chosen), out of fold",
                lambda v: v.get("artifact_probability"),
                span=(0.0, 1.0),
            ),
            Figure(
                "artifact_removed",
                "pairs the artifact gate drops",
                lambda v: (
                    None if "artifact_round" not in v else float(v["artifact_round"] is not None)
                ),
                fmt="{:.1%}",
                plot=False,
                breakdown=True,
            ),
            Figure(
                "artifact_rewritten",
                "pairs whose rejected answer the gate had rewritten",
                lambda v: (
                    None
                    if "artifact_rewritten_from" not in v
                    else float(v["artifact_rewritten_from"] is not None)
                ),
                fmt="{:.1%}",
                plot=False,
            ),
        ),
        severity=lambda r: 4.0 * max(0.0, (r.probability or 0.5) - 0.5),
    ),
)
