"""Whether an intended difference between two answers is in their text, model-free (a leaf).

The rewrite design (pipeline/stages/pairs.py) writes both answers of a pair from one base
answer, each side told how to differ on the dimensions where its user and the contrasting user
differ. What a 1.5B was told is not what it wrote: each difference is verified here where the
dimension is visible in the text (layout by its list markers, depth by length, expertise by
how often terms are explained, any dimension by the words prompts/rewrite.yaml lists for its
levels), and a pair with no realised difference is not released.
"""

from __future__ import annotations

import re

from pipeline.text import runs, word_count, words

_NUMBERED = re.compile(r"^\s*(\d+[.)]|step \d+)", re.IGNORECASE)
_BULLET = re.compile(r"^\s*[-*•]\s+")
# how a text explains a term to a beginner: "X means", "X, which is", "(that is, …)", "called"
_EXPLAINS = re.compile(
    r"\b(means|meaning|which is|that is|i\.e\.|in other words|refers to|is called|"
    r"is when|simply put|in plain words|basically)\b|\(",
    re.IGNORECASE,
)
LISTS = {"step_by_step", "bulleted_list"}
DEPTH = {"brief": 0, "balanced": 1, "in_depth": 2}
EXPERTISE = {"novice": 0, "intermediate": 1, "expert": 2}
LONGER = 1.25  # the deeper answer has at least this many times the shallower one's words


def layout(text: str) -> str:
    """step_by_step (2+ numbered lines), bulleted_list (2+ bullet lines), prose (no list line)
    or mixed."""
    lines = [x for x in text.splitlines() if x.strip()]
    numbered = sum(bool(_NUMBERED.match(x)) for x in lines)
    bullets = sum(bool(_BULLET.match(x)) for x in lines)
    if numbered >= 2 and bullets == 0:
        return "step_by_step"
    if bullets >= 2 and numbered == 0:
        return "bulleted_list"
    return "prose" if numbered + bullets == 0 else "mixed"


def explanations(text: str) -> float:
    """Term explanations per 100 words."""
    return 100 * len(_EXPLAINS.findall(text)) / max(1, word_count(text))


def _sign(words: list[str]) -> re.Pattern:
    alternatives = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)


def shown(text: str, words: list[str]) -> int:
    """How many times the words that show a level occur in a text (whole words, any case)."""
    return len(_sign(words).findall(text)) if words else 0


def unasked(signs: dict[str, list[str]] | None, question: str) -> dict[str, list[str]] | None:
    """Each level's signs less the words the question itself uses: an answer restates its
    question, which shows no user's level (demo-local: "a very busy schedule" counted as
    time_poor on both sides of a pair whose only difference was the partner's "free or cheap")."""
    if not signs:
        return signs
    return {level: [w for w in ws if not shown(question, [w])] for level, ws in signs.items()}


def realised(
    dimension: str,
    levels: tuple[str, str],
    texts: tuple[str, str],
    signs: dict[str, list[str]] | None = None,
) -> bool | None:
    """Whether the two texts differ as their levels say (chosen's first); None: this dimension
    is not visible to a model-free reading. `signs` (level -> words that show it) makes any
    dimension visible: each text leans toward its own user's level, against the other's (one
    answer naming the user's city beside one naming no place changes none of the advice, and a
    blind reader saw no difference in fit in 9 of 15 such pairs; where each named its own
    user's place, in 23 of 25 the reader found the user's answer the better fit).

    A layout shows when one answer is prose and the other a list: numbered steps against the
    same points as bullets read as one answer to a reader of the user's posts (7 of 8 pairs: no
    difference in fit), so two lists are not a realised difference."""
    (a, b), (x, y) = levels, texts
    if signs and a in signs and b in signs:
        return shown(x, signs[a]) > shown(x, signs[b]) and shown(y, signs[b]) > shown(y, signs[a])
    if dimension == "format":
        lists = {a, b} <= LISTS
        return not lists and layout(x) == a and layout(y) == b
    if dimension == "depth" and a in DEPTH and b in DEPTH:
        deep, shallow = (x, y) if DEPTH[a] > DEPTH[b] else (y, x)
        return word_count(deep) >= LONGER * word_count(shallow)
    if dimension == "expertise" and a in EXPERTISE and b in EXPERTISE:
        novice, expert = (x, y) if EXPERTISE[a] < EXPERTISE[b] else (y, x)
        return explanations(novice) > explanations(expert)
    return None


def visible(dimension: str, levels: tuple[str, str]) -> bool:
    """Whether a difference between these two levels can show at all (two lists never do:
    see `realised`): a couple is not asked to write one that cannot."""
    return not (dimension == "format" and set(levels) <= LISTS)


def could_show(
    dimension: str,
    levels: tuple[str, str],
    text: str,
    signs: dict[str, list[str]] | None = None,
) -> bool:
    """Chosen's half of `realised`: False when chosen's text alone already rules the
    difference out (it leans to the other user's level, or is not in its own user's layout),
    so the rejected rewrite need not be asked; True where it takes both texts to tell."""
    a, b = levels
    if signs and a in signs and b in signs:
        return shown(text, signs[a]) > shown(text, signs[b])
    if dimension == "format":
        return visible(dimension, levels) and layout(text) == a
    return True


ECHO = 6  # words in a row: a rewrite that repeats this much of what it was told echoed it


# the instructions call the reader "this user"; an answer never should ("The best-quality
# options are available for this user": real-fit v3, 4 answers of 76 released pairs)
_THIS_USER = re.compile(r"\bthis user\b", re.IGNORECASE)


def echoed(text: str, told: list[str]) -> str | None:
    """The first run of ECHO words of an instruction that the text repeats (a 1.5B writes
    "Lay it out as numbered steps in the order to do them" into its answer), or the
    instructions' "this user" written into it, or None."""
    if any(_THIS_USER.search(t) for t in told) and (found := _THIS_USER.search(text)):
        return found.group(0).lower()
    seen = runs(text, ECHO)
    for instruction in told:
        said = [w.lower() for w in words(instruction)]
        for i in range(len(said) - ECHO + 1):
            if tuple(said[i : i + ECHO]) in seen:
                return " ".join(said[i : i + ECHO])
    return None
