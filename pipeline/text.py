"""Content words of a text: lower-cased words of three letters or more, English stop words
left out. One definition for the `overlap` reward-model baseline and the profile-overlap probe,
so the probe measures exactly what the baseline exploits."""

from __future__ import annotations

import re

_WORD = re.compile(r"[a-z][a-z'-]+")


def content_words(text: str) -> set[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS  # loaded once, when used

    return {w for w in _WORD.findall(text.lower()) if w not in ENGLISH_STOP_WORDS and len(w) > 2}
