"""Simulator answers for the `prb eval` tasks: reward-model judges, the Best-of-N oracle and the
Best-of-N policy. Like the rest of the simulator they read only the request text.

The judges are personalization-aware only through <user_context>: from profile items they infer
the wanted styles with the planner's cues, from aspects or a narrative they recognise the aspect
text, and they reward answers carrying those styles' markers. Without a context they fall back
on what a general judge has: length (longer looks more thorough), position bias and noise.
"""

from __future__ import annotations

import json
import random
import re

from pipeline.sim.responder import (
    DEGRADED,
    FALLBACK,
    ITEM,
    POINTS,
    STYLES,
    Style,
    budget,
    judge_quality,
    keywords,
    layout,
    numbered,
    satisfies,
    styles_of,
    trim,
)

LAPSE = 0.1  # how often a judge overlooks the user context, as real judges sometimes do
LAYOUT_TAGS = {"bullets", "steps"}


def wanted_styles(context: str) -> list[tuple[Style, str]]:
    """(style, aspect text) pairs the user context asks for."""
    if not context.strip():
        return []
    if ITEM.search(context):  # profile items: read them for cues, as the planner does
        return [(s, s.aspect) for s in STYLES if s.cue.search(context)]
    low = context.lower()
    return [(s, s.aspect) for s in [*STYLES, FALLBACK] if s.aspect.lower() in low]


def fit(answer: str, wanted: list[tuple[Style, str]]) -> float:
    return sum(satisfies(s, a, answer) for s, a in wanted) / len(wanted)


def _words(text: str) -> int:
    return len(text.split())


def rm_pointwise(t: dict[str, str], rng: random.Random) -> str:
    answer = t.get("answer", "")
    wanted = wanted_styles(t.get("user_context", ""))
    if answer.strip() == DEGRADED:
        score, why = 1.5, "unhelpful"
    elif wanted and rng.random() >= LAPSE:
        score, why = 2 + 7 * fit(answer, wanted) + rng.uniform(-0.5, 0.5), "fit to the user"
    else:
        score = 5 + min(_words(answer), 150) / 50 + rng.uniform(-1.5, 1.5)
        why = "general impression"
    return json.dumps({"score": round(min(10.0, max(1.0, score)), 1), "reason": why})


def judge_fit(t: dict[str, str], rng: random.Random) -> str:
    """The position-free judge's P(yes): with a user context, the answer's fit to it (as the
    pointwise judge scores it); without, its general quality (the quality judge's three
    scores). The server turns it into a one-token answer with logprobs."""
    if t.get("user_context"):
        p = (json.loads(rm_pointwise(t, rng))["score"] - 1) / 9
    else:
        scores = json.loads(judge_quality(t, rng))
        p = (sum(scores[k] for k in ("correctness", "relevance", "helpfulness")) - 3) / 12
        p = min(0.98, max(0.02, p + rng.uniform(-0.03, 0.03)))
    return json.dumps({"p_yes": round(p, 4)})


def rm_pairwise(t: dict[str, str], rng: random.Random) -> str:
    a, b = t.get("answer_a", ""), t.get("answer_b", "")
    wanted = wanted_styles(t.get("user_context", ""))
    if wanted and rng.random() >= LAPSE:
        fa, fb = fit(a, wanted), fit(b, wanted)
        if fa != fb:
            return json.dumps({"choice": "A" if fa > fb else "B", "reason": "fit to the user"})
    wa, wb = _words(a), _words(b)
    if max(wa, wb) > 1.15 * max(1, min(wa, wb)):
        return json.dumps({"choice": "A" if wa > wb else "B", "reason": "more thorough"})
    roll = rng.random()  # no real difference seen: position bias decides
    choice = "A" if roll < 0.7 else "tie" if roll < 0.8 else "B"
    return json.dumps({"choice": choice, "reason": "about equal"})


def bon_oracle(t: dict[str, str], rng: random.Random) -> str:
    """0/1/2 per aspect: fully met (the aspect's marker), partly (its topic words), or not."""
    aspects = numbered(t.get("aspects", ""))
    answer = t.get("answer", "")
    scores = []
    for i, (style, aspect) in enumerate(zip(styles_of(aspects), aspects, strict=True), 1):
        if satisfies(style, aspect, answer):
            score = 2
        else:
            score = 1 if set(keywords(aspect)) & set(keywords(answer)) else 0
        scores.append({"index": i, "score": score})
    return json.dumps({"scores": scores})


def bon_candidate(t: dict[str, str], system: str, rng: random.Random) -> str:
    """One sampled answer: the same kind of key points, following a random share of the styles
    the profile implies, in a random layout and length, so N samples differ in fit."""
    profile = t.get("profile", "")
    kws = keywords(t.get("question", "")) or ["this"]
    a, b = kws[0], kws[min(1, len(kws) - 1)]
    points = [p.format(a=a, b=b) for p in rng.sample(POINTS, rng.randint(3, 5))]
    styles = [s for s in STYLES if s.cue.search(profile)]
    effort = rng.choice([0.0, 0.3, 0.6, 1.0])  # how much this sample attends to the user
    followed = [s for s in styles if rng.random() < effort]
    layouts = [s.tag for s in followed if s.tag in LAYOUT_TAGS]
    fmt = layouts[0] if layouts else rng.choice(["prose", "prose", "bullets", "steps"])
    opener = " ".join(
        getattr(s, "phrase", "") or s.marker for s in followed if s.tag not in LAYOUT_TAGS
    )
    text = f"{opener or 'Here is what I would suggest.'}\n{layout(points, fmt)}"
    return trim(text, budget(system))


FENCED = re.compile(r"```\n?(.*?)\n?```", re.S)


def published_pairwise(user: str, rng: random.Random) -> str:
    """A general judge given the public pairwise prompt (question and two responses, each in a
    fenced block; no user): prb's pairwise judge without a context, its verdict written as free
    text ending in "Result: X", as the public scorer asks. Real judges do not always comply: a
    share of answers carry markdown or a reasoning block, and some no result at all."""
    blocks = FENCED.findall(user)
    question, a, b = (blocks + ["", "", ""])[:3]
    choice = json.loads(rm_pairwise({"question": question, "answer_a": a, "answer_b": b}, rng))
    verdict = {"A": "A", "B": "B", "tie": "Tie"}[choice["choice"]]
    roll = rng.random()
    if roll < 0.1:
        return f"Both responses answer the question; {choice['reason']}."
    if roll < 0.25:
        return f"<think>Result: B? Let me compare again.</think>\n**Result:** {verdict}"
    return f"Response {verdict} is {choice['reason']}.\nResult: {verdict}"
