"""Profile selection (`profile.top_k`): a user's posts ranked by relevance to the question.

BM25 (the `bm25s` package, English stop words) by default, offline and deterministic; or a
dense retriever, as the published benchmark's authors used (Contriever), when
`profile.dense_model` names a local sentence-transformers model folder: it is loaded from that
folder only (never downloaded) and scores with the model's own similarity function. Ties keep
the profile's order, so the same profile and question always rank the same.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from pipeline.config import ProfileConfig
from pipeline.errors import PrbError
from pipeline.paths import resolve_path
from pipeline.records import ProfileItem, RankedPost


class RetrieverError(PrbError, ValueError):
    """A dense retriever that cannot be loaded; names the folder."""


def bm25_scores(query: str, texts: list[str]) -> list[float]:
    import bm25s

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index at DEBUG

    corpus = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    index = bm25s.BM25()
    index.index(corpus, show_progress=False)
    words = bm25s.tokenize(query, stopwords="en", show_progress=False, return_ids=False)[0]
    known = [w for w in words if w in corpus.vocab]  # a word no post has scores nothing
    return [float(s) for s in index.get_scores(known)] if known else [0.0] * len(texts)


@functools.lru_cache(maxsize=2)
def _dense(path: str):
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as e:
        raise RetrieverError(
            f"profile.dense_model {path}: needs sentence-transformers (`pip install -e .[hf]`)"
        ) from e
    if not Path(path).is_dir():
        raise RetrieverError(f"profile.dense_model {path}: no such folder (a local model only)")
    try:
        return SentenceTransformer(path, device="cpu", local_files_only=True)
    except Exception as e:  # a folder that is not a model: name it, whatever raised
        raise RetrieverError(
            f"profile.dense_model {path}: cannot load a sentence-transformers model: "
            f"{type(e).__name__}: {e}"
        ) from None


def dense_scores(model_path: str, query: str, texts: list[str]) -> list[float]:
    model = _dense(model_path)
    q = model.encode([query], convert_to_tensor=True)
    d = model.encode(texts, convert_to_tensor=True, batch_size=32)
    return [float(s) for s in model.similarity(q, d)[0]]


def check(cfg: ProfileConfig) -> None:
    """Before any call: a configured dense model must load."""
    if cfg.top_k and cfg.dense_model:
        _dense(str(resolve_path(cfg.dense_model)))


def rank(question: str, profile: list[ProfileItem], cfg: ProfileConfig) -> list[RankedPost]:
    texts = [i.text for i in profile]
    if cfg.dense_model:
        scores = dense_scores(str(resolve_path(cfg.dense_model)), question, texts)
    else:
        scores = bm25_scores(question, texts)
    order = sorted(range(len(profile)), key=lambda k: (-round(scores[k], 6), k))
    return [RankedPost(id=profile[k].id, score=round(scores[k], 6)) for k in order]


def retriever(cfg: ProfileConfig) -> str:
    """How posts were ranked, as manifests and cards say it."""
    if not cfg.top_k:
        return "none (every post)"
    return f"dense ({Path(cfg.dense_model).name})" if cfg.dense_model else "bm25 (bm25s)"
