"""The answer-only classifier as a probe: the cross-fitted logistic regression over the
difference of the two answers (pipeline/crossfit.py, which the artifact gate uses too) scored
on a release, each pair by a model that never saw it nor anything sharing its user or an
answer text. A release relabelled at random reads 0.5 on average (the null test)."""

from __future__ import annotations

from pipeline.crossfit import out_of_fold, score
from pipeline.probes.base import Probe, ProbeSpec
from pipeline.release.load import user_key
from pipeline.stats import THRESHOLD, wilson

NAME = "answer-only classifier"
ABOUT = (
    "logistic regression on the difference of the two answers' surface cues and word/char "
    "n-grams, never the user; antisymmetric; folds keep a user and an answer "
    "text together"
)


def classifier_probe(rows: list[dict], seed: int = 0, folds: int = 5) -> Probe:
    probs = out_of_fold(rows, user_key, seed, folds)
    if probs is None:
        return Probe(NAME, None, None, None, len(rows), ABOUT)
    credit = [score(p) for p in probs]
    n = len(credit)
    lo, hi = wilson(round(sum(credit)), n)
    return Probe(NAME, sum(credit) / n, lo, hi, n, ABOUT, leak=lo > THRESHOLD or hi < 1 - THRESHOLD)


PROBE = ProbeSpec(
    "classifier",
    "leakage",
    30,
    lambda rows, seed=0: [classifier_probe(rows, seed)],
    "logistic regression on the two answers only",
)
