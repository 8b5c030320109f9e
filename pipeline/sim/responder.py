"""Deterministic answers for every prompt task in prompts/, read from the request text alone.

The simulator knows nothing of the persona library: like a real model it sees only the prompt.
It finds preference cues in the profile with a small lexicon, turns them into rubric aspects,
writes a chosen answer that visibly follows them and a rejected one with the same key points
that does not, and judges answers with transparent heuristics (topic overlap, length, the
style markers of each aspect). Same request, same answer.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

TAG = re.compile(r"<(\w+)>(.*?)</\1>", re.DOTALL)
ITEM = re.compile(r"^\[([^\]]+)\]\s*(.+)$", re.MULTILINE)
WORD = re.compile(r"[a-z][a-z'-]+")
STOP = set(
    [
        "the",
        "a",
        "an",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "for",
        "with",
        "at",
        "by",
        "from",
        "about",
        "into",
        "over",
        "after",
        "before",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "have",
        "has",
        "had",
        "i",
        "me",
        "my",
        "we",
        "our",
        "you",
        "your",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "how",
        "why",
        "when",
        "where",
        "can",
        "could",
        "should",
        "would",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "get",
        "got",
        "some",
        "any",
        "more",
        "most",
        "other",
        "such",
        "than",
        "too",
        "very",
        "just",
        "also",
        "not",
        "no",
        "so",
        "as",
        "up",
        "out",
        "there",
        "their",
        "them",
        "they",
        "he",
        "she",
        "his",
        "her",
        "one",
        "two",
        "best",
        "good",
        "way",
        "ways",
        "make",
        "start",
        "tips",
    ]
)
DEGRADED = "I'm not sure about that. It depends on many things, so maybe search for it online."


@dataclass(frozen=True)
class Style:
    tag: str
    cue: re.Pattern[str]  # found in a profile item
    aspect: str  # the rubric aspect the planner writes
    marker: str  # what a following answer says; the adherence judge looks for it


def _s(tag: str, cue: str, aspect: str, marker: str) -> Style:
    return Style(tag, re.compile(cue, re.IGNORECASE), aspect, marker)


STYLES = [
    _s(
        "novice",
        r"\b(beginner|never (?:done|tried|played|used)|new to|first time|no idea|"
        r"complete(?:ly)? new|jargon|don't know what)",
        "Explain in plain language for a beginner and define any term",
        "In plain terms",
    ),
    _s(
        "expert",
        r"\b(professional|for \d+ years|years of|advanced|technical|my clients|"
        r"I teach|seasoned)",
        "Use precise technical vocabulary and skip the basics",
        "Technically speaking",
    ),
    _s(
        "brief",
        r"\b(short|tl;?dr|quick answer|skim|too long|just tell me|keep it brief)",
        "Keep it short and limited to the essentials",
        "Short version",
    ),
    _s(
        "in_depth",
        r"\b(why exactly|in detail|deep dive|trade-?offs|nuance|thorough|"
        r"the reasoning)",
        "Give the reasoning and trade-offs behind each point",
        "The reasoning",
    ),
    _s(
        "bullets",
        r"\b(bullet|list|key points|tick (?:them )?off|scan)",
        "Lay the answer out as a bulleted list",
        "- ",
    ),
    _s(
        "steps",
        r"\b(step|in order|sequence|checklist|walk me through|one thing at a time)",
        "Give numbered steps in the order to do them",
        "1. ",
    ),
    _s(
        "casual",
        r"\b(lol|haha|honestly|gonna|kinda|mate|dude|!!)",
        "Keep a relaxed, friendly tone",
        "Honestly,",
    ),
    _s(
        "formal",
        r"\b(kindly|regards|professional manner|precise|formally)",
        "Use a formal, precise register",
        "Please note that",
    ),
    _s(
        "warm",
        r"\b(nervous|anxious|scared|overwhelmed|embarrass|insecure|discouraged|"
        r"worried)",
        "Be encouraging and reassuring about the user's worries",
        "It's completely normal to feel unsure",
    ),
    _s(
        "blunt",
        r"\b(no fluff|straight|cut to|don't sugar|blunt|get to the point)",
        "Be direct and skip pleasantries",
        "Bottom line:",
    ),
    _s(
        "budget",
        r"\b(budget|afford|cheap|broke|money|expensive|cost|pension|student loan)",
        "Keep every suggestion low-cost or free",
        "on a tight budget",
    ),
    _s(
        "time",
        r"\b(busy|minutes|no time|shifts?|commute|kids|lunch break)",
        "Fit the advice into a few minutes a day",
        "with only a few minutes a day",
    ),
    _s(
        "health",
        r"\b(knee|back pain|arthritis|injur|chronic|fatigue|energy|wheelchair|"
        r"illness)",
        "Respect the user's physical limits and energy",
        "at a pace your body allows",
    ),
    _s(
        "access",
        r"\b(blind|low vision|deaf|hearing|screen reader|dyslex|captions)",
        "Suggest options that work with the user's accessibility needs",
        "accessible options",
    ),
    _s(
        "sustain",
        r"\b(eco|sustainab|waste|second-?hand|plastic|environment|ethical)",
        "Prefer low-waste, sustainable options",
        "the sustainable choice",
    ),
    _s(
        "faith",
        r"\b(church|mosque|temple|prayer|faith|halal|kosher|ramadan|sabbath|diwali)",
        "Respect the user's religious practice",
        "in keeping with your faith",
    ),
    _s(
        "evidence",
        r"\b(studies|evidence|research|data|scientific|proof|skeptic)",
        "Back claims with evidence, no folk wisdom",
        "the evidence suggests",
    ),
    _s(
        "tradition",
        r"\b(tradition|heritage|grandmother|ancestors|customs?|elders)",
        "Respect tradition and established custom",
        "the traditional way",
    ),
    _s(
        "career",
        r"\b(career|portfolio|client|job|promotion|income|paid work|hire)",
        "Connect the advice to the user's career goals",
        "for your career",
    ),
    _s(
        "social",
        r"\b(friends|community|club|group|meet people|lonely|together)",
        "Point to ways of sharing this with other people",
        "with other people",
    ),
]
STYLE_BY_ASPECT = {s.aspect.lower(): s for s in STYLES}
FALLBACK = Style(
    "personal",
    re.compile("$^"),
    "Tie the advice to the user's own situation",
    "given what you have shared",
)


def rng_for(*parts: object) -> random.Random:
    return random.Random(hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest())


def keywords(text: str) -> list[str]:
    seen: list[str] = []
    for w in WORD.findall(text.lower()):
        if w not in STOP and len(w) > 3 and w not in seen:
            seen.append(w)
    return seen


def tags(text: str) -> dict[str, str]:
    return {k: v.strip() for k, v in TAG.findall(text)}


def numbered(block: str) -> list[str]:
    return [re.sub(r"^\d+\.\s*", "", line).strip() for line in block.splitlines() if line.strip()]


def bullets(block: str) -> list[str]:
    return [line.lstrip("- ").strip() for line in block.splitlines() if line.strip()]


# --- tasks ------------------------------------------------------------------------------------


def planner(t: dict[str, str], rng: random.Random) -> str:
    items = ITEM.findall(t.get("profile", ""))
    aspects, used = [], set()
    for style in STYLES:
        hits = [(i, text) for i, text in items if style.cue.search(text)]
        if hits and style.tag not in used:
            used.add(style.tag)
            ids = " ".join(f"[{i}]" for i, _ in hits[:2])
            quote = hits[0][1][:60].rstrip()
            aspects.append(
                {
                    "aspect": style.aspect,
                    "evidence": f"{ids} '{quote}'",
                    "reason": f"The profile shows this in {len(hits)} item(s); an answer to this "
                    "question that ignored it would not fit the user.",
                }
            )
    rng.shuffle(aspects)
    aspects = aspects[:4]
    if len(aspects) < 3 and items:
        i, text = items[0]
        aspects.append(
            {
                "aspect": FALLBACK.aspect,
                "evidence": f"[{i}] '{text[:60].rstrip()}'",
                "reason": "The user writes from a specific situation the answer should reflect.",
            }
        )
    narrative = (
        "The user wants an answer that "
        + "; ".join(a["aspect"][0].lower() + a["aspect"][1:] for a in aspects)
        + "."
    )
    return json.dumps({"rubric_aspects": aspects, "narrative": narrative})


POINTS = [
    "Begin with the basics of {a} before anything ambitious",
    "Set a regular, realistic routine around {b}",
    "Use one trusted resource, such as a guide, class or local group, for {a}",
    "Track what works for {b} and adjust every couple of weeks",
    "Avoid the common mistake of doing too much {a} too soon",
    "Ask someone experienced in {b} for feedback early",
]


def content_plan(t: dict[str, str], rng: random.Random) -> str:
    kws = keywords(t.get("question", "")) or ["this"]
    a, b = kws[0], kws[min(1, len(kws) - 1)]
    points = rng.sample(POINTS, 4)
    return json.dumps({"key_points": [p.format(a=a, b=b) for p in points]})


def _layout(points: list[str], fmt: str) -> str:
    if fmt == "bullets":
        return "\n".join(f"- {p}." for p in points)
    if fmt == "steps":
        return "\n".join(f"{i}. {p}." for i, p in enumerate(points, 1))
    return " ".join(f"{p}." for p in points)


def _styles_of(aspects: list[str]) -> list[Style]:
    return [STYLE_BY_ASPECT.get(a.lower(), FALLBACK) for a in aspects]


def _trim(text: str, budget: int) -> str:
    words = text.split(" ")
    return text if len(words) <= budget else " ".join(words[:budget]).rstrip(",;") + "."


def chosen(t: dict[str, str], system: str, rng: random.Random) -> str:
    styles = _styles_of(numbered(t.get("aspects", "")))
    points = bullets(t.get("key_points", ""))
    fmt = next((s.tag for s in styles if s.tag in {"bullets", "steps"}), "prose")
    lead = [s.marker for s in styles if s.tag not in {"bullets", "steps"}]
    opener = (lead[0] + ": " if lead else "") + "here is what I'd suggest"
    if len(lead) > 1:
        opener += ", " + ", ".join(lead[1:])
    body = _layout(points, fmt)
    return _trim(f"{opener}.\n{body}", _budget(system))


def rejected(t: dict[str, str], system: str, rng: random.Random) -> str:
    styles = _styles_of(numbered(t.get("avoid_aspects", "")))
    points = bullets(t.get("key_points", ""))
    wanted = next((s.tag for s in styles if s.tag in {"bullets", "steps"}), "prose")
    fmt = {"bullets": "prose", "steps": "prose", "prose": "bullets"}[wanted]
    opener = "Here is a general overview that applies to most people asking this"
    return _trim(f"{opener}.\n{_layout(points, fmt)}", _budget(system))


def _budget(system: str) -> int:
    m = re.search(r"at most (\d+) words", system)
    return int(m.group(1)) if m else 100


def _quality(question: str, answer: str) -> tuple[int, int, int]:
    if answer.strip() == DEGRADED:
        return 2, 1, 1
    q = set(keywords(question))
    overlap = len(q & set(keywords(answer)))
    n = len(answer.split())
    relevance = 5 if overlap >= 2 else 4 if overlap == 1 else 2
    helpfulness = 5 if n >= 40 else 4 if n >= 20 else 2
    return 5, relevance, helpfulness


def judge_quality(t: dict[str, str], rng: random.Random) -> str:
    c, r, h = _quality(t.get("question", ""), t.get("answer", ""))
    return json.dumps(
        {
            "correctness": c,
            "relevance": r,
            "helpfulness": h,
            "rationale": "heuristic: topic overlap and completeness",
        }
    )


def _satisfies(style: Style, aspect: str, answer: str) -> bool:
    if style is FALLBACK and aspect.lower() != FALLBACK.aspect.lower():
        return len(set(keywords(aspect)) & set(keywords(answer))) >= 2
    if style.tag in {"bullets", "steps"}:
        return any(line.startswith(style.marker) for line in answer.splitlines())
    return style.marker.lower() in answer.lower()


def judge_adherence(t: dict[str, str], rng: random.Random) -> str:
    aspects = numbered(t.get("aspects", ""))
    answer = t.get("answer", "")
    checks = [
        {"index": i, "satisfied": _satisfies(s, a, answer)}
        for i, (s, a) in enumerate(zip(_styles_of(aspects), aspects, strict=True), 1)
    ]
    return json.dumps({"checks": checks})


def judge_blind(t: dict[str, str], rng: random.Random) -> str:
    q = t.get("question", "")
    qa, qb = sum(_quality(q, t.get("answer_a", ""))), sum(_quality(q, t.get("answer_b", "")))
    if abs(qa - qb) >= 2:
        choice = "A" if qa > qb else "B"
    else:
        choice = "A" if rng.random() < 0.2 else "tie"  # a little position bias, as real judges
    return json.dumps({"choice": choice, "reason": "general quality only"})


def detect_task(header: str | None, t: dict[str, str]) -> str:
    if header:
        return header
    if "profile" in t:
        return "planner"
    if "answer_a" in t:
        return "judge_blind"
    if "avoid_aspects" in t:
        return "rejected"
    if "key_points" in t:
        return "chosen"
    if "aspects" in t and "answer" in t:
        return "judge_adherence"
    if "answer" in t:
        return "judge_quality"
    return "content_plan"


def respond(
    task: str | None, messages: list[dict], model: str, seed: int | None, degrade_rate: float = 0.0
) -> str:
    """The answer to one chat request. `degrade_rate` turns that fraction of rejected answers
    (chosen by request hash, so deterministically) into an unhelpful one, for testing filters."""
    system = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")
    user = "\n".join(m.get("content") or "" for m in messages if m.get("role") != "system")
    t = tags(user)
    task = detect_task(task, t)
    rng = rng_for(task, messages, model, seed)
    handlers = {
        "planner": lambda: planner(t, rng),
        "content_plan": lambda: content_plan(t, rng),
        "chosen": lambda: chosen(t, system, rng),
        "rejected": lambda: rejected(t, system, rng),
        "judge_quality": lambda: judge_quality(t, rng),
        "judge_adherence": lambda: judge_adherence(t, rng),
        "judge_blind": lambda: judge_blind(t, rng),
    }
    if task == "rejected" and rng_for("degrade", messages).random() < degrade_rate:
        return DEGRADED
    if task not in handlers:
        return json.dumps({"error": f"the simulator does not know task {task!r}"})
    return handlers[task]()
