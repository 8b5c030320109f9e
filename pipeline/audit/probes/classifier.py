"""The answer-only classifier: logistic regression over the difference of the two answers'
surface cues and word and character n-grams, never the user. Cross-fitted: every pair is scored
by a model that never saw it, nor anything that shares its user or an answer text.

Antisymmetric by construction (no intercept, each training pair shown in both orders): the
score of (a, b) is minus the score of (b, a), so a release relabelled at random reads 0.5 on
average (the null test), and the model cannot learn which slot `chosen` sits in. The gate
(pipeline/stages/gate.py) uses the same out-of-fold probabilities to drop the pairs it
predicts confidently.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline.audit.probes.base import Probe, ProbeSpec, cues
from pipeline.stats import THRESHOLD, wilson
from pipeline.text import normalise

NAME = "answer-only classifier"
ABOUT = (
    "logistic regression on the difference of the two answers' surface cues and word/char "
    "n-grams, never the user; antisymmetric; folds keep a user and an answer "
    "text together"
)


def groups(rows: list[dict], user: Callable[[dict], str]) -> list[int]:
    """Connected components of pairs that share a user or an answer text: one user's pairs,
    the same answer used as chosen in one pair and rejected in another (two users with
    opposite preferences), or a pair whose rejected answer was written for another user
    (`rejected_for`, persona_swap) and that user's pairs, must never span training and test.
    Held apart, the held-out user's kind of answer is seen in training only as `rejected`, and
    the classifier reads far below chance. (Not the question: a question
    bank shared by many users joins almost every pair into one group; pairs that share only a
    question share words that cancel in the difference of their answers.)"""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def keys(r: dict) -> list[str]:
        norm = normalise
        found = [f"u:{user(r)}", f"a:{norm(r['chosen'])}", f"a:{norm(r['rejected'])}"]
        # persona_swap: the rejected answer is its author user's kind of answer
        return found + ([f"u:{r['rejected_for']}"] if r.get("rejected_for") else [])

    keyed = [keys(r) for r in rows]
    for first, *rest in keyed:
        for k in rest:
            parent[find(k)] = find(first)
    roots: dict[str, int] = {}
    return [roots.setdefault(find(k[0]), len(roots)) for k in keyed]


def out_of_fold(
    rows: list[dict], user: Callable[[dict], str], seed: int = 0, folds: int = 5
) -> list[float] | None:
    """Each pair's out-of-fold probability that its `chosen` is the chosen one (0.5: no idea;
    every pair is in exactly one test fold);
    None when the pairs cannot be split into two or more independent groups. `user` names a
    row's user (the release's `user_key`; the build's persona id)."""
    from scipy.sparse import csr_matrix, hstack, vstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    g = groups(rows, user)
    k = min(folds, len(set(g)))
    if len(rows) < 10 or k < 2:
        return None
    chosen = [r["chosen"] for r in rows]
    rejected = [r["rejected"] for r in rows]
    cue_diff = np.asarray(
        [
            [a - b for a, b in zip(cues(c).values(), cues(r).values(), strict=True)]
            for c, r in zip(chosen, rejected, strict=True)
        ]
    )
    cue_diff = cue_diff / (np.abs(cue_diff).max(axis=0) + 1e-9)  # |a - b|: label-free
    out = [0.5] * len(rows)
    splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, test in splitter.split(chosen, groups=g):
        vecs = [
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True, min_df=2),
        ]
        for v in vecs:  # fitted on the training answers only
            v.fit([chosen[i] for i in train] + [rejected[i] for i in train])

        def diff(idx, vecs=vecs):
            parts = [
                v.transform([chosen[i] for i in idx]) - v.transform([rejected[i] for i in idx])
                for v in vecs
            ]
            return hstack([*parts, csr_matrix(cue_diff[idx])]).tocsr()

        d = diff(train)
        x = vstack([d, -d]).tocsr()  # both orders: chosen first (1) and second (0)
        y = np.r_[np.ones(len(train)), np.zeros(len(train))]
        model = LogisticRegression(max_iter=2000, C=1.0, fit_intercept=False).fit(x, y)
        for i, p in zip(test, model.predict_proba(diff(test))[:, 1], strict=True):
            out[i] = float(p)
    return out


def score(prob: float) -> float:
    """A pair's credit: right 1, wrong 0, no preference (exactly 0.5) half."""
    return 1.0 if prob > 0.5 else 0.0 if prob < 0.5 else 0.5


def classifier_probe(rows: list[dict], seed: int = 0, folds: int = 5) -> Probe:
    from pipeline.release.load import user_key  # the release layer reads the checks: lazily

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
