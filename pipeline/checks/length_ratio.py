"""Length ratio, model-free: rejected words / chosen words. Reward models favour longer answers;
a pair whose answers differ much in length can be won on length instead of personal fit."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field, model_validator

from pipeline.checks.base import Check, Figure, Released, Report
from pipeline.records import Record
from pipeline.stats import LENGTH_BAND, word_count


class Settings(Record):
    min_length_ratio: float = Field(0.6, gt=0)
    max_length_ratio: float = Field(1.6, gt=0)

    @model_validator(mode="after")
    def _band(self) -> Settings:
        if self.min_length_ratio > self.max_length_ratio:
            raise ValueError(
                f"min_length_ratio {self.min_length_ratio} is above max_length_ratio "
                f"{self.max_length_ratio}: no pair could pass"
            )
        return self


class Result(Record):
    ratio: Annotated[float, Released("length_ratio")]


words = word_count  # the length probe's and the length reward model's count


CHECK = Check(
    name="length_ratio",
    order=40,
    settings=Settings,
    result=Result,
    measure=lambda pair, _, __: Result(
        ratio=round(words(pair.rejected) / max(1, words(pair.chosen)), 4)
    ),
    decide=lambda r, s: (
        [] if s.min_length_ratio <= r.ratio <= s.max_length_ratio else ["length_ratio"]
    ),
    report=Report(
        about="length ratio (rejected/chosen words)",
        docs={
            "min_length_ratio": "rejected/chosen word ratio ≥",
            "max_length_ratio": "rejected/chosen word ratio ≤",
        },
        figures=(
            Figure(
                "length_ratio",
                "median length ratio (rejected/chosen words)",
                lambda v: v.get("length_ratio"),
                "median",
                expect=LENGTH_BAND,
                warning="length could stand in for personal fit",
                lines=lambda s: (s.min_length_ratio, s.max_length_ratio),
                breakdown=True,
            ),
        ),
        severity=lambda r: 4 * abs(math.log(max(r.ratio, 1e-3))),
    ),
)
