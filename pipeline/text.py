"""Content words of a text: lower-cased words of three letters or more, English stop words
left out. One definition for the `overlap` reward-model baseline and the profile-overlap probe,
so the probe measures exactly what the baseline exploits."""

from __future__ import annotations

import re

from pipeline.stats import words

_WORD = re.compile(r"[a-z][a-z'-]+")


def runs(text: str, n: int) -> set[tuple[str, ...]]:
    """The text's runs of n words, lower-cased (the probes' word count): what copying shares."""
    w = [x.lower() for x in words(text)]
    return {tuple(w[i : i + n]) for i in range(len(w) - n + 1)}


def content_words(text: str) -> set[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # loaded once, when used

    return {w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS and len(w) > 2}
