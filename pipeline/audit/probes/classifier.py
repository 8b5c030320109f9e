"""The answer-only classifier: logistic regression over the surface cues and word and character
n-grams of the two answers, cross-validated with folds grouped by user."""

from __future__ import annotations

import random

import numpy as np

from pipeline.audit.probes.base import Probe, ProbeSpec, cues
from pipeline.release.load import user_key
from pipeline.stats import THRESHOLD, wilson


def classifier_probe(rows: list[dict], seed: int = 0, folds: int = 5) -> Probe:
    """Answer-only logistic regression, folds grouped by user; Wilson interval on accuracy."""
    from scipy.sparse import csr_matrix, hstack
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    about = ("logistic regression on surface cues and word/char n-grams of the two answers, "
             "never the user; folds grouped by user")  # fmt: skip
    groups = [user_key(r) for r in rows]
    k = min(folds, len(set(groups)))
    if len(rows) < 10 or k < 2:
        return Probe("answer-only classifier", None, None, None, len(rows), about)
    rng = random.Random(seed)
    first, second, y = [], [], []
    for r in rows:  # each pair shown once, in a random order: is the first answer chosen?
        flip = rng.random() < 0.5
        first.append(r["rejected"] if flip else r["chosen"])
        second.append(r["chosen"] if flip else r["rejected"])
        y.append(0 if flip else 1)
    y = np.asarray(y)
    cue_diff = np.asarray([[a - b for a, b in zip(cues(x).values(), cues(z).values(),
                                                   strict=True)]
                           for x, z in zip(first, second, strict=True)])  # fmt: skip
    cue_diff = cue_diff / (np.abs(cue_diff).max(axis=0) + 1e-9)
    right = 0
    for train, test in GroupKFold(n_splits=k).split(first, y, groups):
        vecs = [
            TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True),
            TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True),
        ]
        for v in vecs:  # fitted on the training answers only
            v.fit([first[i] for i in train] + [second[i] for i in train])

        def features(idx, vecs=vecs):
            diffs = [v.transform([first[i] for i in idx]) - v.transform([second[i] for i in idx])
                     for v in vecs]  # fmt: skip
            return hstack([*diffs, csr_matrix(cue_diff[idx])]).tocsr()

        train_y = y[train]
        if len(set(train_y)) < 2:  # one class only: predict it
            right += int((y[test] == train_y[0]).sum())
            continue
        model = LogisticRegression(max_iter=2000, C=1.0).fit(features(train), train_y)
        right += int((model.predict(features(test)) == y[test]).sum())
    n = len(rows)
    lo, hi = wilson(right, n)
    return Probe("answer-only classifier", right / n, float(lo), float(hi), n, about,
                 leak=float(lo) > THRESHOLD)  # fmt: skip


PROBE = ProbeSpec("classifier", "leakage", 30, lambda rows, seed=0: [classifier_probe(rows, seed)],
                  "logistic regression on the two answers only")
