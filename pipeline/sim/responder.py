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
    phrase: str = ""  # the sentence a following answer opens with; contains the marker


def _s(tag: str, cue: str, aspect: str, marker: str, phrase: str = "") -> Style:
    return Style(tag, re.compile(cue, re.IGNORECASE), aspect, marker, phrase)


STYLES = [
    _s(
        "novice",
        r"\b(beginner|never (?:done|tried|played|used)|new to|first time|no idea|"
        r"complete(?:ly)? new|jargon|don't know what)",
        "Explain in plain language for a beginner and define any term",
        "In plain terms",
        "In plain terms, you can begin with no experience at all.",
    ),
    _s(
        "expert",
        r"\b(professional|for \d+ years|years of|advanced|technical|my clients|"
        r"I teach|seasoned)",
        "Use precise technical vocabulary and skip the basics",
        "For a practitioner",
        "For a practitioner, your key variables are consistency and load progression.",
    ),
    _s(
        "brief",
        r"\b(short|tl;?dr|quick answer|skim|too long|just tell me|keep it brief)",
        "Keep it short and limited to the essentials",
        "Essentials only",
        "Essentials only, with nothing here that you would need to skip.",
    ),
    _s(
        "in_depth",
        r"\b(why exactly|in detail|deep dive|trade-?offs|nuance|thorough|"
        r"the reasoning)",
        "Give the reasoning and trade-offs behind each point",
        "why each point matters",
        "Here is why each point matters for you: steady change lasts.",
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
        "No stress,",
        "No stress, this is much easier than it looks for you.",
    ),
    _s(
        "formal",
        r"\b(kindly|regards|professional manner|precise|formally)",
        "Use a formal, precise register",
        "Please note that",
        "Please note that your recommendations below follow in order of priority.",
    ),
    _s(
        "warm",
        r"\b(nervous|anxious|scared|overwhelmed|embarrass|insecure|discouraged|"
        r"worried)",
        "Be encouraging and reassuring about the user's worries",
        "It's completely normal to feel unsure",
        "It's completely normal to feel unsure, and you are on track.",
    ),
    _s(
        "blunt",
        r"\b(no fluff|straight|cut to|don't sugar|blunt|get to the point)",
        "Be direct and skip pleasantries",
        "Bottom line:",
        "Bottom line: do these things, and you can skip the rest.",
    ),
    _s(
        "budget",
        r"\b(budget|afford|cheap|broke|money|expensive|cost|pension|student loan)",
        "Keep every suggestion low-cost or free",
        "spending little or nothing",
        "All of this works well for you spending little or nothing.",
    ),
    _s(
        "time",
        r"\b(busy|minutes|no time|shifts?|commute|kids|lunch break)",
        "Fit the advice into a few minutes a day",
        "in small daily sessions",
        "Each point fits easily into your day in small daily sessions.",
    ),
    _s(
        "health",
        r"\b(knee|back pain|arthritis|injur|chronic|fatigue|energy|wheelchair|"
        r"illness)",
        "Respect the user's physical limits and energy",
        "the pace your body allows",
        "Take each point at the pace your body allows, with rests.",
    ),
    _s(
        "access",
        r"\b(blind|low vision|deaf|hearing|screen reader|dyslex|captions)",
        "Suggest options that work with the user's accessibility needs",
        "accessible options",
        "Where there is a choice, pick accessible options that suit you.",
    ),
    _s(
        "sustain",
        r"\b(eco|sustainab|waste|second-?hand|plastic|environment|ethical)",
        "Prefer low-waste, sustainable options",
        "the greener choice",
        "Used or long-lasting gear is the greener choice for you here.",
    ),
    _s(
        "faith",
        r"\b(church|mosque|temple|prayer|faith|halal|kosher|ramadan|sabbath|diwali)",
        "Respect the user's religious practice",
        "in keeping with your beliefs",
        "Each suggestion here can be arranged in keeping with your beliefs.",
    ),
    _s(
        "evidence",
        r"\b(studies|evidence|research|data|scientific|proof|skeptic)",
        "Back claims with evidence, no folk wisdom",
        "tested in trials",
        "These points all hold up, tested in trials you can trust.",
    ),
    _s(
        "tradition",
        r"\b(tradition|heritage|grandmother|ancestors|customs?|elders)",
        "Respect tradition and established custom",
        "the way your family knows",
        "Where it fits, start out from the way your family knows.",
    ),
    _s(
        "career",
        r"\b(career|portfolio|client|job|promotion|income|paid work|hire)",
        "Connect the advice to the user's career goals",
        "for your working life",
        "Each point also builds something quite useful for your working life.",
    ),
    _s(
        "social",
        r"\b(friends|community|club|group|meet people|lonely|together)",
        "Point to ways of sharing this with other people",
        "with other people",
        "Most of this is more fun for you with other people.",
    ),
]
STYLE_BY_TAG = {s.tag: s for s in STYLES}
FALLBACK = Style(
    "personal",
    re.compile("$^"),
    "Tie the advice to the user's own situation",
    "given what you have shared",
    "This answer is shaped given what you have shared with me.",
)
LAYOUTS = {"bullets", "steps"}

# Sentences in a register, carrying no aspect's marker: what rejected answers open with.
# Each is about as long as a style phrase, so rejected and chosen stay within the same budget.
REGISTERS = {
    "generic": [
        "Here is a general overview that applies to most people.",
        "These points hold in most situations like this one.",
        "Most people asking this question get good results from the following.",
        "There is no single right answer, but these points cover the basics.",
    ],
    "technical": [
        "In practice, the determining factors are adherence, load and feedback latency.",
        "Treat this as an iterative optimisation problem with a short review cycle.",
        "The standard protocol front-loads fundamentals, then periodises the workload.",
        "Operationally, this is a matter of throughput, recovery and error correction.",
    ],
    "basic": [
        "First, a quick explanation: a routine just means doing something regularly.",
        "To put it simply, the idea is to start small and build up slowly.",
        "If you have never done this before, that is fine, it is simple.",
        "A guide here means any book, video or class that shows you how.",
    ],
    "expansive": [
        "There is a lot to unpack here, so it helps to see the whole picture.",
        "It is worth looking at each point from several angles before starting.",
        "Each of these points connects to the others, which is why order matters.",
        "Consider the wider context first, then come back to the specifics below.",
    ],
    "terse": [
        "Key points follow.",
        "Brief overview.",
        "Essentials below.",
        "Summary follows.",
    ],
    "formal_register": [
        "Kindly consider the following recommendations in the order presented.",
        "The following recommendations are offered for your consideration.",
        "It is advisable to observe the following points with due care.",
        "One should attend to the following matters in a methodical manner.",
    ],
    "chatty": [
        "Oh, great question, this one comes up all the time!",
        "So, fun fact, loads of people wonder about exactly this!",
        "Right, let's have a little chat about this, shall we?",
        "Ooh, love this one, there's a lot you can do here!",
    ],
    "detached": [
        "The following is a neutral summary of common recommendations.",
        "Outcomes vary; the recommendations below are standard.",
        "This is the conventional advice, stated without qualification.",
        "The points below are listed without regard to circumstances.",
    ],
}


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


def theirs(text: str, style: Style) -> str:
    """The user's own words an aspect rests on, quoted: a few words around the cue (a good
    planner names what this user wrote; prb refuses an aspect any user would get)."""
    found = style.cue.search(text)
    at = len(text[: found.start()].split()) if found else 0
    return "'" + " ".join(text.split()[max(at - 3, 0) : at + 7]).rstrip(".,;:!?") + "'"


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
                    "aspect": f"{style.aspect}, as they wrote {theirs(hits[0][1], style)}",
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
                "aspect": f"{FALLBACK.aspect}, as they wrote {theirs(text, FALLBACK)}",
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


def layout(points: list[str], fmt: str) -> str:
    if fmt == "bullets":
        return "\n".join(f"- {p}." for p in points)
    if fmt == "steps":
        return "\n".join(f"{i}. {p}." for i, p in enumerate(points, 1))
    return " ".join(f"{p}." for p in points)


def style_of(aspect: str) -> Style:
    """The style an aspect asks for: the planner's own words, else the first style whose cue
    the aspect's words carry (imported users' aspects are free text), else FALLBACK."""
    own = planners_own(aspect)
    if own:
        return own
    return next((s for s in STYLES if s.cue.search(aspect)), FALLBACK)


def planners_own(aspect: str) -> Style | None:
    """The style whose aspect the planner wrote (its words, then what the user wrote)."""
    low = aspect.lower()
    return next((s for s in [*STYLES, FALLBACK] if low.startswith(s.aspect.lower())), None)


def styles_of(aspects: list[str]) -> list[Style]:
    return [style_of(a) for a in aspects]


def points_of(t: dict[str, str], task: str) -> list[str]:
    """The key points an answer covers: the shared plan's; without one (the published recipe
    writes each answer straight from the question) each answer picks its own, as two separate
    model calls would: which points, and how many, differ between chosen and rejected."""
    points = bullets(t.get("key_points", ""))
    if points:
        return points
    rng = rng_for("points", task, t.get("question", ""), t.get("past_posts", ""))
    kws = keywords(t.get("question", "")) or ["this"]
    a, b = kws[0], kws[min(1, len(kws) - 1)]
    return [p.format(a=a, b=b) for p in rng.sample(POINTS, rng.randint(3, 5))]


def trim(text: str, budget: int) -> str:
    words = text.split(" ")
    return text if len(words) <= budget else " ".join(words[:budget]).rstrip(",;") + "."


def _opener_words(styles: list[Style]) -> int:
    """How long the chosen answer's opening is, so a rejected one can match it."""
    return sum(len(s.phrase.split()) for s in styles if s.tag not in LAYOUTS)


def chosen(t: dict[str, str], system: str, rng: random.Random) -> str:
    styles = styles_of(numbered(t.get("aspects", "")))
    points = points_of(t, "chosen")
    fmt = next((s.tag for s in styles if s.tag in LAYOUTS), "prose")
    opener = " ".join(s.phrase for s in styles if s.tag not in LAYOUTS)
    return trim(
        f"{opener or 'Here is what I would suggest.'}\n{layout(points, fmt)}", budget(system)
    )


def _rejected_register(strategy: str, wanted: set[str], rng: random.Random) -> str:
    """The register a rejected answer is written in: one that misses every wanted aspect in the
    way its strategy names (see the `strategies:` table of prompts/rejected.yaml)."""
    if strategy == "wrong_expertise":
        if "novice" in wanted:
            return "technical"
        if "expert" in wanted:
            return "basic"
        return rng.choice(["technical", "basic"])
    if strategy == "wrong_format":
        if "brief" in wanted:
            return "expansive"
        if "in_depth" in wanted:
            return "terse"
        return rng.choice(["expansive", "terse"])
    if strategy == "wrong_tone":
        if wanted & {"casual", "warm"}:
            return "formal_register"
        if wanted & {"formal", "blunt"}:
            return "chatty"
        return "detached"
    return "generic"


def _rejected_layout(strategy: str, wanted: set[str], rng: random.Random) -> str:
    if wanted & LAYOUTS:
        return "prose"  # every strategy drops the requested list or steps
    if strategy == "wrong_format":
        return rng.choice(sorted(LAYOUTS))  # prose was (implicitly) fine: impose a list
    return "prose"


# Whose answer a rejected one is written as: a fixed derangement of the styles, opposite styles
# swapped and the others in cycles of phrases of about the same length. Each opening sentence is
# then some users' chosen and other users' rejected, about as often, so no sentence and no
# length marks an answer as rejected without knowing the user.
MISFIT = {
    "novice": "expert",
    "expert": "novice",
    "brief": "in_depth",
    "in_depth": "brief",
    "casual": "formal",
    "formal": "casual",
    "warm": "blunt",
    "blunt": "warm",
    "budget": "time",
    "time": "faith",
    "faith": "tradition",
    "tradition": "career",
    "career": "budget",
    "health": "access",
    "access": "sustain",
    "sustain": "social",
    "social": "health",
    "evidence": "personal",
    "personal": "evidence",
}


# How far along MISFIT each strategy goes, and how it orders its sentences: every strategy is
# still a derangement of the styles (balanced), but they miss the user in different ways.
STEPS = {"ignore_aspects": 1, "wrong_expertise": 2, "wrong_tone": 3, "wrong_format": 1}


def _misfit_styles(styles: list[Style], strategy: str, rng: random.Random) -> list[Style]:
    """For each style the user wants (layouts aside), a style along MISFIT (`STEPS[strategy]`
    steps on) that the user does not want and the answer does not use yet."""
    by_tag = {**STYLE_BY_TAG, FALLBACK.tag: FALLBACK}
    wanted = {s.tag for s in styles}
    picks: list[Style] = []
    for s in styles:
        if s.tag in LAYOUTS:
            continue
        t = s.tag
        for _ in range(STEPS.get(strategy, 1)):
            t = MISFIT[t]
        for _ in range(len(MISFIT)):
            if t not in wanted and all(p.tag != t for p in picks):
                picks.append(by_tag[t])
                break
            t = MISFIT[t]
    if strategy == "wrong_expertise":
        picks.reverse()
    elif strategy == "wrong_tone":
        picks = picks[1:] + picks[:1]
    return picks


def _borrow(text: str, own: list[str]) -> str:
    """A lexical decoy: the user's own words put in place of as many plain words of `text`
    (never a second-person word), so the answer looks tailored and keeps its length."""
    words = text.split(" ")
    slots = [
        i for i, w in enumerate(words) if w.isalpha() and w.lower() not in YOU_WORDS and len(w) > 3
    ][-len(own) :]
    for i, w in zip(slots, own, strict=False):
        words[i] = w
    return " ".join(words)


YOU_WORDS = {"you", "your", "yours", "yourself"}


def rejected(t: dict[str, str], system: str, rng: random.Random, leaky: bool = False) -> str:
    """Same key points, same order, about the same length as the chosen answer, opening with
    the sentences of styles this user does not want (the opposite ones where they exist); it
    carries no marker of any wanted aspect. `leaky` (the simulator's `--leaky`) writes it the
    careless way instead: a generic register of its own, hedged and shorter."""
    styles = styles_of(numbered(t.get("aspects") or t.get("avoid_aspects", "")))
    wanted = {s.tag for s in styles}
    strategy = t.get("strategy") or tags(system).get("strategy") or "ignore_aspects"
    points = points_of(t, "rejected")
    fmt = _rejected_layout(strategy, wanted, rng)
    if not leaky:
        opener = " ".join(s.phrase for s in _misfit_styles(styles, strategy, rng))
        if strategy == "lexical_decoy":  # the user's own words, none of their aspects
            own = keywords(t.get("past_posts", ""))
            if own:  # in place of some of the opener's words: the same length and cues
                opener = _borrow(opener, rng.sample(own, min(3, len(own))))
        return trim(
            f"{opener or 'Here is what I would suggest.'}\n{layout(points, fmt)}", budget(system)
        )
    points = [f"It may depend, but perhaps {p[0].lower()}{p[1:]}" for p in points[:-1]]
    register = _rejected_register(strategy, wanted, rng)
    pool = REGISTERS[register][:]
    rng.shuffle(pool)
    target = 1 if register == "terse" else max(1, _opener_words(styles) - 3)
    opener: list[str] = []
    while sum(len(x.split()) for x in opener) < target and len(opener) < 2 * len(pool):
        opener.append(pool[len(opener) % len(pool)])
    return trim(" ".join(opener) + "\n" + layout(points, fmt), budget(system))


def budget(system: str) -> int:
    m = re.search(r"(?:at most|within) (\d+) words", system)
    return int(m.group(1)) if m else 100


def _openers() -> tuple[str, ...]:
    """Every sentence a simulated answer opens with (styles, registers, the default)."""
    found = [s.phrase for s in [*STYLES, FALLBACK] if s.phrase and s.tag not in LAYOUTS]
    return (*found, *(x for xs in REGISTERS.values() for x in xs), "Here is what I would suggest.")


def _in_order(answer: str) -> bool:
    """An answer reads in order if an opening sentence it has comes first (a shuffled one
    has its opener somewhere in the middle)."""
    text = answer.lstrip()
    present = [o for o in _openers() if o in text]
    return not present or any(text.startswith(o) for o in present)


def _repeats(answer: str) -> bool:
    lines = [x.strip().lower() for x in answer.splitlines() if x.strip()]
    return len(lines) >= 3 and len(set(lines)) <= len(lines) / 2


def _quality(question: str, answer: str) -> tuple[int, int, int]:
    """Correctness falls for an answer cut off mid-sentence or out of order; relevance with
    the question's words it lacks; helpfulness with length and with lines said over again."""
    if answer.strip() == DEGRADED:
        return 2, 1, 1
    q = set(keywords(question))
    overlap = len(q & set(keywords(answer)))
    n = len(answer.split())
    correct = 5 if answer.rstrip().endswith((".", "!", "?", ")", '"')) and _in_order(answer) else 2
    relevance = 5 if overlap >= 2 else 4 if overlap == 1 else 2
    helpfulness = 1 if _repeats(answer) else 5 if n >= 40 else 4 if n >= 20 else 2
    return correct, relevance, helpfulness


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


def satisfies(style: Style, aspect: str, answer: str) -> bool:
    if style is FALLBACK and planners_own(aspect) is not FALLBACK:
        return len(set(keywords(aspect)) & set(keywords(answer))) >= 2
    if style.tag in {"bullets", "steps"}:
        return any(line.startswith(style.marker) for line in answer.splitlines())
    return style.marker.lower() in answer.lower()


def judge_adherence(t: dict[str, str], rng: random.Random) -> str:
    aspects = numbered(t.get("aspects", ""))
    answer = t.get("answer", "")
    checks = [
        {"index": i, "satisfied": satisfies(s, a, answer)}
        for i, (s, a) in enumerate(zip(styles_of(aspects), aspects, strict=True), 1)
    ]
    return json.dumps({"checks": checks})


def judge_blind(t: dict[str, str], rng: random.Random) -> str:
    """Picks on general quality; when that is level it falls for a much longer answer
    (verbosity bias) or, now and then, for whatever comes first (position bias), as real
    judges do. Only asking in both orders separates real quality leaks from the latter."""
    q, a, b = t.get("question", ""), t.get("answer_a", ""), t.get("answer_b", "")
    qa, qb = sum(_quality(q, a)), sum(_quality(q, b))
    na, nb = len(a.split()), len(b.split())
    if abs(qa - qb) >= 2:
        choice, reason = ("A" if qa > qb else "B"), "one answer is more helpful"
    elif max(na, nb) > 1.4 * max(1, min(na, nb)):
        choice, reason = ("A" if na > nb else "B"), "one answer is more complete"
    else:
        choice, reason = ("A" if rng.random() < 0.2 else "tie"), "no real difference"
    return json.dumps({"choice": choice, "reason": reason})


# --- the rewrite design (prompts/base_answer.yaml, prompts/rewrite.yaml) -------------------------


def base_answer(t: dict[str, str], rng: random.Random) -> str:
    """One paragraph for a general reader: the points every rewrite keeps."""
    kws = keywords(t.get("question", "")) or ["this"]
    a, b = kws[0], kws[min(1, len(kws) - 1)]
    return layout([p.format(a=a, b=b) for p in rng.sample(POINTS, 4)], "prose")


def rewrite(t: dict[str, str], user: str, system: str) -> str:
    """The base answer rewritten as the instructions after it say, as a model that follows
    them would: the layout they name, cut to the main points or each given its reason, terms
    explained in brackets."""
    points = [p.strip() for p in re.split(r"(?<=\.)\s+", t.get("answer", "")) if p.strip()]
    points = [p.rstrip(".") for p in points] or ["Start small"]
    said = user.partition("</user_said>")[2].lower()
    if "2 or 3 most important points" in said:
        points = points[:3]
    if "add one sentence saying why" in said:
        points = [f"{p}, because it keeps you steady" for p in points]
    if "what it means in" in said:  # the first term explained, as a beginner needs
        points[0] = f"{points[0]} (that is, the simplest first step)"
    if "country this user lives in" in said:  # the place the user named, once
        where = _PLACE.search(user.partition("<user_said>")[2].partition("</user_said>")[0])
        points[0] = f"{points[0]} in {where.group(1) if where else 'your country'}"
    for told, lead in _LIMITS.items():
        if told in said:
            points[0] = f"{lead}: {points[0][:1].lower()}{points[0][1:]}"
    fmt = "steps" if "numbered steps" in said else "bullets" if "bullet points" in said else ""
    return trim(layout(points, fmt or "prose"), budget(system))


# where a user said they live ("I live in Berlin", "I'm from Chile")
_PLACE = re.compile(r"\b(?:in|from)\s+((?:[A-Z][\w'-]+)(?:\s+[A-Z][\w'-]+)?)")
# what a rewrite told of a user's limits (prompts/rewrite.yaml constraints) says up front
_LIMITS = {
    "free or cheap": "Free or cheap options first",
    "best-quality": "Worth paying for the best-quality kit",
    "only minutes a day": "In a quick ten minutes",
    "plenty of free time": "Over a few slow hours",
    "gentle and short": "Gently, with rests",
    "has a disability": "In an accessible way",
}
