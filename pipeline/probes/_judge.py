"""What the judge probes share (`prb audit --judge`): one judge over one release's rows, asked
under three user contexts — none (`blind`), the row's user (`true`) and a contrasting user
(`contrast`: for a pair whose rejected answer was written for someone, that user; else one
from pipeline/contrast.py).

Two kinds of judge: pairwise (`rm_pairwise`: both answers shown, asked in both A/B orders) and
position-free (`judge_fit`: each answer alone, P(yes) to "would this user be satisfied?" from
the first token's logprobs; an answer wins when its P(yes) is strictly higher) — for a small
model whose pairwise verdicts follow the A/B position (Qwen2.5-1.5B answered "A" in both
orders), the only judge it can be. A probe asks for the contexts it needs; a question two
probes share is one call (the client's cache and in-flight dedupe).
"""

from __future__ import annotations

import asyncio

from pipeline.calls import LLMError, PermanentLLMError
from pipeline.contrast import User, contrasts
from pipeline.llm.prompts import load_prompt
from pipeline.probes.base import Probe, rule
from pipeline.records import POINTS
from pipeline.release.load import user_context, user_key
from pipeline.stats import wilson

AWARE = 0.9  # the persona-aware judge should reach this: below it, pairs miss the user


class Judge:
    """`model` through `llm` over `rows`; `position_free` picks the kind."""

    def __init__(self, rows: list[dict], llm, model: str, position_free: bool = False) -> None:
        self.rows, self.llm, self.model, self.position_free = rows, llm, model, position_free
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
        self.users = users
        self.other = contrasts(users)
        # a pair whose rejected answer was written for another user: that user is its contrast,
        # from the release's `rejected_for_profile`, else from that user's own rows
        by_key = {u.key: u for u in users.values()}
        self.written_for = {}
        for r in rows:
            other = r.get("rejected_for")
            if r.get("rejected_for_profile"):
                posts = {"profile": r["rejected_for_profile"]}
                self.written_for[r["id"]] = User(
                    key=str(other),
                    category=str(r["category"]),
                    aspects="",
                    levels={},
                    profile=user_context(posts, "profile"),
                )
            elif other in by_key:
                self.written_for[r["id"]] = by_key[other]
        self.other |= self.written_for

    def contexts(self, r: dict, who: tuple[str, ...]) -> dict[str, str]:
        found = {"blind": "", "true": self.users[r["id"]].profile}
        if r["id"] in self.other:
            found["contrast"] = self.other[r["id"]].profile
        return {w: found[w] for w in who if w in found}

    async def _call(self, prompt: str, variables: dict):
        try:
            result = await self.llm.call(
                load_prompt(prompt),
                stage="audit",
                model=self.model,
                fit="user_context",
                variables=variables,
            )
            return result.value
        except PermanentLLMError:
            raise
        except LLMError:
            return None

    async def pairwise(self, who: tuple[str, ...], rows: list[dict] | None = None) -> list[dict]:
        """Per row: `{context}_ab` / `{context}_ba` -> the pairwise verdict (A, B or tie) with
        chosen shown first / second; None where the call failed."""

        async def ask(ctx: str, q: str, a: str, b: str) -> str | None:
            said = {"user_context": ctx, "question": q, "answer_a": a, "answer_b": b}
            value = await self._call("rm_pairwise", said)
            return None if value is None else value.choice

        async def one(r: dict) -> dict:
            q, c, j = r["question"], r["chosen"], r["rejected"]
            keys, asked = [], []
            for w, ctx in self.contexts(r, who).items():
                for order, (a, b) in (("ab", (c, j)), ("ba", (j, c))):
                    keys.append(f"{w}_{order}")
                    asked.append(ask(ctx, q, a, b))
            return dict(zip(keys, await asyncio.gather(*asked), strict=True))

        return await asyncio.gather(*(one(r) for r in (self.rows if rows is None else rows)))

    async def margins(self, who: tuple[str, ...], rows: list[dict] | None = None) -> list[dict]:
        """Per row: context -> P(yes) of chosen minus P(yes) of rejected, each asked alone;
        None where a call failed."""

        async def p_yes(ctx: str, q: str, answer: str) -> float | None:
            said = {"user_context": ctx, "question": q, "answer": answer}
            value = await self._call("judge_fit", said)
            return None if value is None else value.p_yes

        async def one(r: dict) -> dict:
            contexts = self.contexts(r, who)
            got = await asyncio.gather(
                *(
                    p_yes(ctx, r["question"], a)
                    for ctx in contexts.values()
                    for a in (r["chosen"], r["rejected"])
                )
            )
            pairs = zip(got[::2], got[1::2], strict=True)
            return {
                w: None if c is None or j is None else c - j
                for w, (c, j) in zip(contexts, pairs, strict=True)
            }

        return await asyncio.gather(*(one(r) for r in (self.rows if rows is None else rows)))


def chosen_points(verdicts: dict, who: str) -> float | None:
    """Chosen's share of the points under context `who` over both orders (a tie half)."""
    ab, ba = verdicts.get(f"{who}_ab"), verdicts.get(f"{who}_ba")
    if not ab or not ba:
        return None
    return (POINTS[ab] + 1.0 - POINTS[ba]) / 2


def shown_on(row: dict) -> str | None:
    """What a rewrite pair's text shows it differs on (its realised dimensions, joined by
    "+"), or None for a row with no `differences` (the plan design, another release)."""
    shown = [d["dimension"] for d in row.get("differences") or () if d.get("realised")]
    return "+".join(sorted(shown)) or None


def by_difference(
    found: Probe, rows: list[dict], scores: list[float | None], seed: int
) -> list[Probe]:
    """`found` split by what each pair shows it differs on (`shown_on`): one probe per kind
    with its own n and interval, named after `found` (rows without differences: none). A
    judge that reads a named place more surely than a layout shows it here."""
    groups: dict[str, list[float]] = {}
    for r, score in zip(rows, scores, strict=True):
        if score is not None and (kind := shown_on(r)):
            groups.setdefault(kind, []).append(score)
    out = []
    for kind, got in sorted(groups.items()):
        part = rule(
            f"{found.name}: {kind} pairs", f"{found.about}; the pairs that show {kind}", got, seed
        )
        part.leak = None  # a part is information: the whole probe carries the flag
        out.append(part)
    return out


def won(margin: float) -> float:
    """Chosen's score from a position-free margin: 1 higher, 0 lower, ½ equal."""
    return 1.0 if margin > 0 else 0.0 if margin < 0 else 0.5


def survival(name: str, about: str, survives: list[bool]) -> Probe:
    """The share of favoured pairs whose advantage survives a swap of users: a leak when its
    lower end is above 0.5 (most preferences do not depend on who the user is)."""
    if not survives:
        return Probe(name, None, None, None, 0, about, kind="share")
    k, n = sum(survives), len(survives)
    lo, hi = wilson(k, n)
    return Probe(name, k / n, float(lo), float(hi), n, about, leak=float(lo) > 0.5, kind="share")
