"""BM25: the answer a BM25 ranker (the `bm25s` package) scores higher against the user's
profile wins. A shallow user-aware baseline, like profile overlap: a floor a reward model must
beat, never a leak. Inverse document frequencies come from every answer of the release, so a
word that every answer uses counts for little."""

from __future__ import annotations

import logging

from pipeline.probes.base import Probe, ProbeSpec, more_wins, rule
from pipeline.release.load import profile_text


def bm25_probe(rows: list[dict], seed: int = 0) -> Probe:
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)
    about = "the answer BM25 ranks higher against the user's profile wins (bm25s)"
    if not rows:
        return Probe("BM25 ranker", None, None, None, 0, about, family="floor")
    texts = [t for r in rows for t in (r["chosen"], r["rejected"])]
    corpus = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    index = bm25s.BM25()
    index.index(corpus, show_progress=False)
    queries = bm25s.tokenize(
        [profile_text(r) for r in rows], stopwords="en", show_progress=False, return_ids=False
    )
    scores = []
    for i, query in enumerate(queries):
        known = [w for w in query if w in corpus.vocab]
        found = index.get_scores(known) if known else None
        c, r = (0.0, 0.0) if found is None else (found[2 * i], found[2 * i + 1])
        scores.append(more_wins(c, r))
    return rule("BM25 ranker", about, scores, seed, floor=True)


PROBE = ProbeSpec(
    "bm25",
    "floor",
    45,
    lambda rows, seed=0: [bm25_probe(rows, seed)],
    "the answer BM25 ranks higher against the profile wins",
)
