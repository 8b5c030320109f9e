"""Off the question, model-free (issue 26's quality floor): an answer that does not answer its
own question. Each answer is scored by BM25 (the `bm25s` package, as profile ranking uses, over
Snowball word stems: "paints" meets "painting") against every distinct question of the run; an
answer that shares no word with its question, or that reads as an answer to several other
questions before its own, is off the question: a stock deflection ("it depends, search
online"), or the answer to another question."""

from __future__ import annotations

import functools
import logging
import re
from typing import Annotated

from pydantic import Field

from pipeline.checks.base import Check, Figure, Released, Report
from pipeline.records import Pair, Record


class Settings(Record):
    # its own question's rank among the run's distinct questions: at most this many, or this
    # share of them in a large run (similar questions there can outrank it)
    max_question_rank: int = Field(10, ge=1)
    max_question_rank_share: float = Field(0.05, gt=0, le=1)
    drop_off_question: bool = True


class Result(Record):
    # 1: its own question fits it best; None: no word in common
    chosen_rank: Annotated[int | None, Released("chosen_question_rank")]
    rejected_rank: Annotated[int | None, Released("rejected_question_rank")]
    questions: int  # distinct questions it was ranked among


@functools.cache
def _stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def tokenize(texts, **kw):
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", stemmer=_stemmer(), show_progress=False, **kw)


_SPLIT = re.compile(r"(?u)\b\w\w+\b").findall  # bm25s.tokenize's own pattern


@functools.cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN  # what tokenize's stopwords="en" reads

    return frozenset(STOPWORDS_EN)


def words(text: str) -> list[str]:
    """One text's stems, in order: `tokenize(text, return_ids=False)[0]` without the three
    progress bars bm25s makes per call (disabled, still built: 40% of the check's time)."""
    stop = _stopwords()
    return _stemmer().stemWords([w for w in _SPLIT(text.lower()) if w not in stop])


class Index:
    """The run's distinct questions, indexed once."""

    def __init__(self, questions: list[str]):
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.questions = sorted(set(questions))
        self.at = {q: i for i, q in enumerate(self.questions)}
        self.tokens = tokenize(self.questions)
        blank = self.tokens.vocab.get("")  # bm25s's token for a text of stop words only
        self.empty = {i for i, ids in enumerate(self.tokens.ids) if set(ids) <= {blank}}
        self.bm25 = None
        if len(self.empty) < len(self.questions):  # bm25s cannot index a corpus with no word
            self.bm25 = bm25s.BM25()
            self.bm25.index(self.tokens, show_progress=False)

    def rank(self, answer: str, question: str) -> int | None:
        if self.bm25 is None or self.at[question] in self.empty:
            return 1  # a question of stop words only: nothing to measure an answer against
        known = [w for w in words(answer) if w and w in self.tokens.vocab]
        if not known:
            return None
        scores = self.bm25.get_scores(known)
        own = scores[self.at[question]]
        return None if own <= 0 else 1 + int((scores > own).sum())


def prepare(pairs, _cfg) -> Index:
    return Index([p.task.question for p in pairs])


def measure(pair: Pair, _: object, index: Index | None) -> Result:
    index = index or Index([pair.task.question])
    q = pair.task.question
    return Result(
        chosen_rank=index.rank(pair.chosen, q),
        rejected_rank=index.rank(pair.rejected, q),
        questions=len(index.questions),
    )


def off(rank: int | None, questions: int, s: Settings) -> bool:
    return rank is None or rank > max(s.max_question_rank, s.max_question_rank_share * questions)


def decide(r: Result, s: Settings) -> list[str]:
    bad = off(r.chosen_rank, r.questions, s) or off(r.rejected_rank, r.questions, s)
    return ["off_question"] if s.drop_off_question and bad else []


CHECK = Check(
    name="off_question",
    floor=True,
    order=36,
    settings=Settings,
    result=Result,
    prepare=prepare,
    measure=measure,
    decide=decide,
    report=Report(
        about="each answer's own question's BM25 rank among the run's questions (off the question)",
        docs={
            "max_question_rank": "an answer's own question must rank among this many of the run's "
            "questions by BM25 against the answer:",
            "max_question_rank_share": "... or among this share of them, if more:",
            "drop_off_question": "drop a pair where an answer shares no word with its question or "
            "ranks it lower than that",
        },
        figures=(
            Figure(
                "off_question",
                "pairs where an answer shares no word with its question",
                lambda v: float(
                    v["chosen_question_rank"] is None or v["rejected_question_rank"] is None
                ),
                fmt="{:.1%}",
                plot=False,
            ),
        ),
        severity=lambda r: 3.0 * ((r.chosen_rank is None) + (r.rejected_rank is None)),
    ),
)
