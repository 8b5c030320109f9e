"""The surface cues of one answer (list markers, headings, second person, hedges,
exclamations, readability): what the cue probes compare and the answer-only classifier
(pipeline/crossfit.py) reads beside the n-grams. Below both the audit and the checks."""

from __future__ import annotations

import re

from pipeline.stats import words

_LIST = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+", re.M)
_HEADING = re.compile(r"^\s*(?:#{1,6}\s+\S|[A-Z][^.!?\n]{0,60}:\s*$)", re.M)
_YOU = re.compile(r"\b(?:you|your|yours|yourself|you're|you'll)\b", re.I)
_HEDGE = re.compile(
    r"\b(?:might|may|perhaps|possibly|could|generally|usually|often|likely|probably|maybe|"
    r"somewhat|it depends|in most cases|tends? to)\b",
    re.I,
)
_SENTENCE = re.compile(r"[.!?]+(?:\s|$)")


def _syllables(word: str) -> int:
    groups = re.findall(r"[aeiouy]+", word.lower())
    n = len(groups) - (1 if word.lower().endswith("e") and len(groups) > 1 else 0)
    return max(1, n)


def readability(text: str) -> float:
    """Flesch reading ease (higher: easier)."""
    w = words(text)
    if not w:
        return 0.0
    sentences = max(1, len(_SENTENCE.findall(text)))
    return 206.835 - 1.015 * len(w) / sentences - 84.6 * sum(map(_syllables, w)) / len(w)


def cues(text: str) -> dict[str, float]:
    """Surface cues of one answer; rates are per word."""
    n = max(1, len(words(text)))
    return {
        "list markers": float(len(_LIST.findall(text))),
        "headings": float(len(_HEADING.findall(text))),
        "second person": len(_YOU.findall(text)) / n,
        "hedges": len(_HEDGE.findall(text)) / n,
        "exclamations": float(text.count("!")),
        "readability": readability(text),
    }


CUES = tuple(cues("x"))
