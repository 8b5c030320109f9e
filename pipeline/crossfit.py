"""The cross-fitted answer-only classifier: logistic regression over the difference of the two
answers' surface cues and word and character n-grams, never the user. Every pair is scored by a
model that never saw it, nor anything that shares its user or an answer text. Shared by the
audit's classifier probe (pipeline/probes/classifier.py) and the artifact gate
(pipeline/checks/artifact.py), below both.

Antisymmetric by construction (no intercept, each training pair shown in both orders): the
score of (a, b) is minus the score of (b, a), so a release relabelled at random reads 0.5 on
average (the null test), and the model cannot learn which slot `chosen` sits in.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from pipeline.cues import cues
from pipeline.text import normalise

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix


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

    def text(t: str) -> str:  # a digest, not the text: 50,000 pairs' answers twice over
        return "a:" + hashlib.blake2b(normalise(t).encode(), digest_size=12).hexdigest()

    def keys(r: dict) -> list[str]:
        found = [f"u:{user(r)}", text(r["chosen"]), text(r["rejected"])]
        # persona_swap: the rejected answer is its author user's kind of answer
        return found + ([f"u:{r['rejected_for']}"] if r.get("rejected_for") else [])

    keyed = [keys(r) for r in rows]
    for first, *rest in keyed:
        for k in rest:
            parent[find(k)] = find(first)
    roots: dict[str, int] = {}
    return [roots.setdefault(find(k[0]), len(roots)) for k in keyed]


# a fold's model is fitted on at most this many pairs (a seeded sample of its training pairs
# beyond it), and scores CHUNK pairs at a time: below ~12,500 pairs every training pair is used
MAX_TRAIN = 10_000
CHUNK = 5_000
PIECE = 2_000  # pairs whose feature differences are made at once


class Features:
    """The n-gram counts and surface cues of a set of pairs' answers, computed once and shared
    by every fold and every AFLite round (`take`): a fold only restricts the vocabulary to
    the terms in at least two of its training answers and weighs them by their idf there, which
    is what a TfidfVectorizer fitted on those answers computes (min_df=2, smooth idf, sublinear
    tf, l2 rows), without tokenising any text again. Each distinct text is counted once."""

    def __init__(self, rows: list[dict]):
        from sklearn.feature_extraction.text import CountVectorizer

        index: dict[str, int] = {}
        self.chosen = np.asarray([index.setdefault(r["chosen"], len(index)) for r in rows])
        self.rejected = np.asarray([index.setdefault(r["rejected"], len(index)) for r in rows])
        texts = list(index)
        self.counts = [
            CountVectorizer(ngram_range=(1, 2), dtype=np.int32).fit_transform(texts),
            CountVectorizer(analyzer="char_wb", ngram_range=(3, 5), dtype=np.int32).fit_transform(
                texts
            ),
        ]
        cue = np.asarray([list(cues(t).values()) for t in texts])
        self.cue_diff = cue[self.chosen] - cue[self.rejected]

    def take(self, idx: list[int]) -> Features:
        """The features of the pairs at `idx` (the counts shared, not copied)."""
        part = copy.copy(self)
        part.chosen, part.rejected = self.chosen[idx], self.rejected[idx]
        part.cue_diff = self.cue_diff[idx]
        return part

    def weights(self, train: np.ndarray) -> Callable[[np.ndarray], list]:
        """A fold's tf-idf, fitted on its training pairs' answers (both of each): a function
        from text indices to their rows, made only for the texts a step needs."""
        from sklearn.preprocessing import normalize

        docs = np.bincount(
            np.r_[self.chosen[train], self.rejected[train]], minlength=self.counts[0].shape[0]
        )
        fitted = []
        for counts in self.counts:
            df = (counts > 0).T.astype(np.int64) @ docs  # a text used twice counts twice
            keep = np.flatnonzero(df >= 2)
            fitted.append((counts, keep, np.log((1 + 2 * len(train)) / (1 + df[keep])) + 1))

        def rows(texts: np.ndarray) -> list:
            out = []
            for counts, keep, idf in fitted:
                x = counts[texts][:, keep].astype(np.float64)
                np.log(x.data, x.data)
                x.data += 1
                out.append(normalize(x.multiply(idf).tocsr()))
            return out

        return rows


def both_orders(pieces: list) -> csr_matrix:
    """The rows of `pieces` and then their negations, as one CSR matrix: what vstack([*pieces,
    *(-p for p in pieces)]) makes, array for array, but filled in place, each piece freed once
    copied, so the training matrix costs itself (at 50,000 pairs of simulated text, 0.55 GiB),
    not itself plus the pieces and their negated copies."""
    from scipy.sparse import csr_matrix

    nnz, rows = sum(p.nnz for p in pieces), sum(p.shape[0] for p in pieces)
    cols = pieces[0].shape[1]
    kind = np.int32 if 2 * max(nnz, rows) < np.iinfo(np.int32).max else np.int64
    data, indices = np.empty(2 * nnz), np.empty(2 * nnz, kind)
    indptr = np.zeros(2 * rows + 1, kind)
    at = row = 0
    while pieces:
        p = pieces.pop(0).tocsr()
        data[at : at + p.nnz], indices[at : at + p.nnz] = p.data, p.indices
        indptr[row + 1 : row + p.shape[0] + 1] = p.indptr[1:] + at
        at, row = at + p.nnz, row + p.shape[0]
    np.negative(data[:nnz], out=data[nnz:])
    indices[nnz:] = indices[:nnz]
    indptr[rows + 1 :] = indptr[1 : rows + 1] + nnz
    return csr_matrix((data, indices, indptr), shape=(2 * rows, cols))


def out_of_fold(
    rows: list[dict],
    user: Callable[[dict], str],
    seed: int = 0,
    folds: int = 5,
    features: Features | None = None,
) -> list[float] | None:
    """Each pair's out-of-fold probability that its `chosen` is the chosen one (0.5: no idea;
    every pair is in exactly one test fold);
    None when the pairs cannot be split into two or more independent groups. `user` names a
    row's user (the release's `user_key`; the build's persona id). `features`: the rows'
    `Features` when the caller has them (AFLite's rounds: `Features.take`)."""
    from scipy.sparse import csr_matrix, hstack, vstack
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    g = groups(rows, user)
    k = min(folds, len(set(g)))
    if len(rows) < 10 or k < 2:
        return None
    f = features if features is not None else Features(rows)
    cue_diff = f.cue_diff / (np.abs(f.cue_diff).max(axis=0) + 1e-9)  # |a - b|: label-free
    out = [0.5] * len(rows)
    splitter = GroupKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, test in splitter.split(rows, groups=g):
        if len(train) > MAX_TRAIN:  # a seeded sample: the fit's memory stays bounded
            train = np.sort(np.random.default_rng(seed).choice(train, MAX_TRAIN, replace=False))
        tfidf = f.weights(train)  # fitted on the training answers only

        def diff(idx, tfidf=tfidf):  # a few thousand rows at a time: no whole copies
            pieces = []
            for start in range(0, len(idx), PIECE):
                part = idx[start : start + PIECE]
                pairs = zip(tfidf(f.chosen[part]), tfidf(f.rejected[part]), strict=True)
                pieces.append(hstack([*(a - b for a, b in pairs), csr_matrix(cue_diff[part])]))
            return pieces

        x = both_orders(diff(train))  # chosen first (1), then second (0)
        y = np.r_[np.ones(len(train)), np.zeros(len(train))]
        model = LogisticRegression(max_iter=2000, C=1.0, fit_intercept=False).fit(x, y)
        del x
        for start in range(0, len(test), CHUNK):  # scored a chunk at a time
            part = test[start : start + CHUNK]
            scored = model.predict_proba(vstack(diff(part)).tocsr())[:, 1]
            for i, p in zip(part, scored, strict=True):
                out[i] = float(p)
    return out


def score(prob: float) -> float:
    """A pair's credit: right 1, wrong 0, no preference (exactly 0.5) half."""
    return 1.0 if prob > 0.5 else 0.0 if prob < 0.5 else 0.5
