"""Text helpers shared across prb (a leaf: imports nothing of prb): the one word tokenizer,
`normalise()`, word runs, content words (lower-cased words of three letters or more, English
stop words left out: one definition for the `overlap` reward-model baseline and the
profile-overlap probe, so the probe measures exactly what the baseline exploits), and
`terminal()`, the one way foreign text reaches a terminal."""

from __future__ import annotations

import re

# a word: letters, with inner apostrophes and hyphens; list markers, numbers and punctuation are
# not words (a bulleted answer and the same text as prose have the same length)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
# C0 and C1 controls (ESC starts every terminal escape), DEL, and the bidirectional overrides
# that reorder what a line shows
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_UNSAFE_IN_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _shown(m: re.Match) -> str:
    return m.group().encode("unicode_escape").decode()


def terminal(text: object, lines: bool = False) -> str:
    """`text` safe to print on one terminal line: every control character, escape sequence
    introducer and bidi override shown as its `\\xNN`/`\\uNNNN` escape, never obeyed (a
    release's id holding ESC [2J would otherwise clear the user's screen). `lines`: a text of
    several lines (an answer) keeps its line breaks and tabs."""
    return (_UNSAFE_IN_LINES if lines else _UNSAFE).sub(_shown, str(text))


def jsonl_lines(text: str) -> list[str]:
    """The non-blank lines of a JSON Lines text, split at "\n" alone: `str.splitlines` also
    splits at U+2028, U+0085 and other breaks that a JSON string may hold raw (an imported
    post with a line separator made a valid release unreadable)."""
    return [line for line in text.split("\n") if line.strip()]


def unwrap(text: str, tag: str) -> str:
    """The text without the prompt's own tag around it (a small model copies `<answer>` from
    the prompt into its reply, on both sides of a pair alike)."""
    text = text.strip()
    text = text.removeprefix(f"<{tag}>").removesuffix(f"</{tag}>")
    return text.strip()


def words(text: str) -> list[str]:
    """The words of a text: the one tokenizer every probe, check and baseline counts with."""
    return _WORD.findall(text)


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def normalise(text: object) -> str:
    """Case and runs of whitespace folded away: how two texts are compared for sameness."""
    return " ".join(str(text).casefold().split())


def runs(text: str, n: int) -> set[tuple[str, ...]]:
    """The text's runs of n words, lower-cased (the probes' word count): what copying shares."""
    w = [x.lower() for x in words(text)]
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def content_words(text: str) -> set[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # loaded once, when used

    return {w for w in words(text.lower()) if w not in ENGLISH_STOP_WORDS and len(w) > 2}
