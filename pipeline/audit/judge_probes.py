"""Judge probes for any release (`prb audit RELEASE --judge`): what a pairwise judge model says
about the pairs with and without the user. Both use the `rm_pairwise` prompt through pipeline/llm/
(cached like every call), in both A/B orders.

- persona-aware: the judge sees the user's profile; it should pick chosen (flagged when its
  interval's upper end is below 0.9).
- persona-blind: the judge sees the question and the two answers, not the user. Accuracy over
  both orders (a tie half), and split by chosen shown as A and as B (position bias shows as a
  gap). Flagged when its 95% interval lies beyond `probes.THRESHOLD` on either side of 0.5:
  general quality separates the pairs.
- counterfactual: the judge sees the user's profile, then a contrasting user's
  (pipeline/contrast.py; for a `persona_swap` pair, the user its rejected answer was written
  for, `rejected_for`). Of the pairs the judge gives chosen more than half the points under
  the true profile, the share whose advantage survives the swap (at least as large): won on
  something other than this user. A leak when that share's lower end is above 0.5 - a release
  where most preferences do not depend on who the user is.

`position_free` asks the same three questions of a position-free judge (`judge_fit`: each
answer alone, P(yes) to "would this user be satisfied?" from the first token's logprobs; an
answer wins when its P(yes) is strictly higher): for a small model whose pairwise verdicts
follow the A/B position (Qwen2.5-1.5B answered "A" in both orders), the only judge it can be.
"""

from __future__ import annotations

import asyncio

from pipeline.calls import LLMError, PermanentLLMError
from pipeline.contrast import User, contrasts
from pipeline.eval.rewards import user_context
from pipeline.llm.prompts import load_prompt
from pipeline.probes.base import Probe, rule
from pipeline.records import POINTS, advantage
from pipeline.release.load import user_key
from pipeline.stats import wilson

AWARE = 0.9  # the persona-aware judge should reach this: below it, pairs miss the user


def _users(rows: list[dict]) -> tuple[dict, dict]:
    """Each row's user, and the contrasting user the counterfactual probe swaps in."""
    users = {
        r["id"]: User(
            key=user_key(r),
            category=str(r["category"]),
            aspects=user_context(r, "aspects"),
            levels={},
            profile=user_context(r, "profile"),
        )
        for r in rows
    }
    other = contrasts(users)
    # persona_swap rows name the user their rejected answer was written for: the contrast
    by_persona = {u.key: u for u in users.values()}
    other |= {
        r["id"]: by_persona[r["rejected_for"]] for r in rows if r.get("rejected_for") in by_persona
    }
    return users, other


def _contexts(r: dict, users: dict, other: dict) -> dict[str, str]:
    contexts = {"blind": "", "true": users[r["id"]].profile}
    if r["id"] in other:
        contexts["contrast"] = other[r["id"]].profile
    return contexts


async def run(rows: list[dict], llm, model: str, seed: int = 0) -> list[Probe]:
    prompt = load_prompt("rm_pairwise")
    users, other = _users(rows)

    async def ask(ctx: str, q: str, a: str, b: str) -> str | None:
        try:
            result = await llm.call(
                prompt,
                stage="audit",
                model=model,
                fit="user_context",
                variables={"user_context": ctx, "question": q, "answer_a": a, "answer_b": b},
            )
            return result.value.choice
        except PermanentLLMError:
            raise
        except LLMError:
            return None

    async def one(r: dict) -> dict:
        q, c, j = r["question"], r["chosen"], r["rejected"]
        contexts = _contexts(r, users, other)
        verdicts = await asyncio.gather(
            *(ask(ctx, q, *ans) for ctx in contexts.values() for ans in ((c, j), (j, c)))
        )
        return {
            f"{who}_{order}": v
            for (who, order), v in zip(
                [(w, o) for w in contexts for o in ("ab", "ba")], verdicts, strict=True
            )
        }

    answers = await asyncio.gather(*(one(r) for r in rows))
    found = [aware(answers, seed), *blind(answers, seed), counterfactual(answers)]
    for p in found:
        p.family = "judge"
    return found


def aware(answers: list[dict], seed: int = 0) -> Probe:
    """With the user's profile the judge should pick chosen (a high floor); flagged when the
    interval's upper end is below 0.9: the pairs do not encode what the user wants."""
    about = "a pairwise judge with the user's profile, both orders (should be high)"
    scores = [POINTS[a["true_ab"]] for a in answers if a.get("true_ab")] + [
        1.0 - POINTS[a["true_ba"]] for a in answers if a.get("true_ba")
    ]
    found = rule("judge, persona-aware", about, scores, seed)
    if found.value is not None:  # flagged when too low, not when far from 0.5
        found.leak = found.high < AWARE
    return found


def blind(answers: list[dict], seed: int = 0) -> list[Probe]:
    as_a = [POINTS[a["blind_ab"]] for a in answers if a.get("blind_ab")]
    as_b = [1.0 - POINTS[a["blind_ba"]] for a in answers if a.get("blind_ba")]
    out = []
    for name, scores, about in (
        ("judge, persona-blind", as_a + as_b, "a pairwise judge without the user, both orders"),
        ("judge, persona-blind, chosen as A", as_a, "chosen shown first"),
        ("judge, persona-blind, chosen as B", as_b, "chosen shown second"),
    ):
        found = rule(name, about, scores, seed)  # off 0.5 either way: general quality separates
        if name != "judge, persona-blind":
            found.leak = None  # the position splits: information
        out.append(found)
    return out


def counterfactual(answers: list[dict]) -> Probe:
    about = (
        "of the pairs the judge favours chosen under the user's profile, the share that "
        "keeps that advantage under a contrasting user's profile (not personal)"
    )
    decided = [
        a
        for a in answers
        if all(a.get(k) for k in ("true_ab", "true_ba", "contrast_ab", "contrast_ba"))
    ]
    favoured = [a for a in decided if advantage(a["true_ab"], a["true_ba"]) > 1.0]
    survives = [
        advantage(a["contrast_ab"], a["contrast_ba"]) >= advantage(a["true_ab"], a["true_ba"])
        for a in favoured
    ]
    return survival("judge, counterfactual: survives the swap", about, survives)


def survival(name: str, about: str, survives: list[bool]) -> Probe:
    """The share of favoured pairs whose advantage survives the swap: a leak when its lower
    end is above 0.5 (most preferences do not depend on who the user is)."""
    if not survives:
        return Probe(name, None, None, None, 0, about, kind="share")
    k, n = sum(survives), len(survives)
    lo, hi = wilson(k, n)
    return Probe(name, k / n, float(lo), float(hi), n, about, leak=float(lo) > 0.5, kind="share")


async def position_free(rows: list[dict], llm, model: str, seed: int = 0) -> list[Probe]:
    """The judge probes by a position-free judge: per context (none, the user's profile, a
    contrasting user's), each answer's P(yes) asked alone; chosen wins when its P(yes) is
    strictly higher (equal: a tie, half)."""
    prompt = load_prompt("judge_fit")
    users, other = _users(rows)

    async def p_yes(ctx: str, q: str, answer: str) -> float | None:
        try:
            result = await llm.call(
                prompt,
                stage="audit",
                model=model,
                fit="user_context",
                variables={"user_context": ctx, "question": q, "answer": answer},
            )
            return result.value.p_yes
        except PermanentLLMError:
            raise
        except LLMError:
            return None

    async def one(r: dict) -> dict[str, float | None]:
        contexts = _contexts(r, users, other)
        got = await asyncio.gather(
            *(
                p_yes(ctx, r["question"], a)
                for ctx in contexts.values()
                for a in (r["chosen"], r["rejected"])
            )
        )
        pairs = zip(got[::2], got[1::2], strict=True)
        return {
            who: None if c is None or j is None else c - j
            for who, (c, j) in zip(contexts, pairs, strict=True)
        }

    margins = await asyncio.gather(*(one(r) for r in rows))

    def won(who: str) -> list[float]:
        return [
            1.0 if m[who] > 0 else 0.0 if m[who] < 0 else 0.5
            for m in margins
            if m.get(who) is not None
        ]

    found = rule(
        "judge, persona-aware, position-free",
        "each answer alone with the user's "
        "profile: P(yes) from logprobs, chosen higher (should be high)",
        won("true"),
        seed,
    )
    if found.value is not None:
        found.leak = found.high < AWARE
    blind_probe = rule(
        "judge, persona-blind, position-free",
        "each answer alone without the user: P(yes) from logprobs, chosen higher",
        won("blind"),
        seed,
    )
    about = (
        "of the pairs where chosen's P(yes) is higher under the user's profile, the share "
        "whose margin is as large under a contrasting user's (not personal)"
    )
    favoured = [
        m
        for m in margins
        if m.get("true") is not None and m["true"] > 0 and m.get("contrast") is not None
    ]
    swap = survival(
        "judge, counterfactual, position-free: survives the swap",
        about,
        [m["contrast"] >= m["true"] for m in favoured],
    )
    out = [found, blind_probe, swap]
    for p in out:
        p.family = "judge"
    return out
