"""Degenerate text, model-free (issue 26's quality floor, its first check): an answer that is
empty or far too short, that repeats its own lines, or that loops on a phrase (its most
repeated word 4-gram covers much of it, or it compresses far better than prose does). Such an
answer is not one a user would get, whatever a judge says of it: the bundled 135M model
released answers that were its aspects repeated line by line. Runs before any judge, so a
dropped pair costs no judge call."""

from __future__ import annotations

import zlib
from collections import Counter

from pydantic import Field

from pipeline.checks.base import Check, Figure, Report, both, released
from pipeline.records import Record
from pipeline.stats import words


class Settings(Record):
    min_answer_words: int = Field(8, ge=0)
    max_repeated_lines: float = Field(0.34, gt=0, le=1)  # share of lines said before
    max_loop_share: float = Field(0.3, gt=0, le=1)  # words in the most repeated 4-gram
    min_compression: float = Field(0.22, ge=0, le=1)  # zlib size / text size, long texts
    drop_degenerate: bool = True


class Side(Record):
    words: int
    repeated_lines: float
    loop_share: float
    compression: float | None  # None: too short to say


class Result(Record):
    chosen: Side
    rejected: Side

    # released: each answer's share of repeated lines and of words in its most repeated 4-gram
    chosen_repeated_lines = released("float32", lambda r: r.chosen.repeated_lines)
    rejected_repeated_lines = released("float32", lambda r: r.rejected.repeated_lines)
    chosen_loop_share = released("float32", lambda r: r.chosen.loop_share)
    rejected_loop_share = released("float32", lambda r: r.rejected.loop_share)


def side(text: str) -> Side:
    lines = [" ".join(x.lower().split()) for x in text.splitlines() if x.strip()]
    said = sum(1 for i, x in enumerate(lines) if x in lines[:i])
    w = [x.lower() for x in words(text)]
    grams = Counter(tuple(w[i : i + 4]) for i in range(len(w) - 3))
    top = grams.most_common(1)[0][1] if grams else 0
    raw = text.encode()
    return Side(
        words=len(w),
        repeated_lines=round(said / len(lines), 4) if lines else 0.0,
        loop_share=round(4 * top / len(w), 4) if top > 1 else 0.0,
        compression=round(len(zlib.compress(raw, 9)) / len(raw), 4) if len(raw) >= 400 else None,
    )


def why(s: Side, cfg: Settings) -> list[str]:
    out = []
    if s.words < cfg.min_answer_words:
        out.append("too short")
    if s.repeated_lines > cfg.max_repeated_lines:
        out.append("repeated lines")
    if s.loop_share > cfg.max_loop_share or (
        s.compression is not None and s.compression < cfg.min_compression
    ):
        out.append("looping")
    return out


def decide(r: Result, cfg: Settings) -> list[str]:
    if not cfg.drop_degenerate:
        return []
    return ["degenerate"] if why(r.chosen, cfg) or why(r.rejected, cfg) else []


CHECK = Check(
    name="degenerate",
    floor=True,
    order=33,
    settings=Settings,
    result=Result,
    measure=lambda pair, _, __: Result(chosen=side(pair.chosen), rejected=side(pair.rejected)),
    decide=decide,
    report=Report(
        about="each answer's words, share of repeated lines, share of its most repeated 4-gram and "
        "compression ratio (degenerate text)",
        docs={
            "min_answer_words": "an answer needs at least this many words:",
            "max_repeated_lines": "largest share of an answer's lines that repeat an earlier one:",
            "max_loop_share": "largest share of an answer's words in its most repeated 4-gram:",
            "min_compression": "smallest zlib compression ratio of an answer of 400+ bytes:",
            "drop_degenerate": "drop a pair where an answer is degenerate by any of these",
        },
        figures=(
            Figure(
                "repeated_lines",
                "share of lines repeated",
                both("chosen_repeated_lines", "rejected_repeated_lines"),
                "sides",
            ),
            Figure(
                "loop_share",
                "share of words in the most repeated 4-gram",
                both("chosen_loop_share", "rejected_loop_share"),
                "sides",
            ),
        ),
        severity=lambda r: (
            3.0
            * (
                max(r.chosen.repeated_lines, r.rejected.repeated_lines)
                + max(r.chosen.loop_share, r.rejected.loop_share)
            )
        ),
    ),
)
