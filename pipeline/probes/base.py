"""What every probe shares: the `Probe` figure it reports, the `ProbeSpec` a probe module
declares, a rule's accuracy with its interval. (An answer's surface cues: pipeline/cues.py.)"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.stats import EASY, THRESHOLD, wilson


@dataclass
class Probe:
    name: str
    value: float | None
    low: float | None
    high: float | None
    n: int
    about: str
    leak: bool | None = None  # flagged (leakage: a leak; floor: easy); None: cannot say
    kind: str = "accuracy"  # "accuracy" (0.5 = chance) or "ratio"
    family: str = "leakage"  # its ProbeSpec's: leakage, floor or judge

    def as_dict(self) -> dict:
        r = lambda x: None if x is None or math.isnan(x) else round(x, 4)  # noqa: E731
        return {
            "name": self.name,
            "value": r(self.value),
            "low": r(self.low),
            "high": r(self.high),
            "n": self.n,
            "about": self.about,
            "leak": self.leak,
            "kind": self.kind,
            "family": self.family,
        }


@dataclass(frozen=True)
class ProbeSpec:
    """A probe module's declaration (`PROBE`): what the audit, compare and the card read.

    `family`: leakage (answer only, never the user: only these can call a release leaky),
    floor (a shallow user-aware baseline a reward model must beat) or judge (an LLM judge).
    A model-free probe gives `run(rows, seed)`; a judge probe gives `asks(rows, judge, seed)`
    instead, a coroutine that puts its questions to the `probes._judge.Judge` it is handed
    (`prb audit --judge`; questions two probes share are one call: the client's cache)."""

    name: str
    family: str
    order: int
    run: Callable[[list[dict], int], list[Probe]] | None
    about: str
    asks: Callable[[list[dict], Any, int], Awaitable[list[Probe]]] | None = None


def rule(name: str, about: str, scores: list[float], seed: int, floor: bool = False) -> Probe:
    """A fixed rule's accuracy from per-pair scores (1 right, 0 wrong, 0.5 tie), with its
    Wilson interval (a tie counts half). The rule's
    direction is fixed in advance, never picked on the data (picking the better of "more wins"
    and "less wins" reads above 0.5 on pairs with no signal), so its value may fall below 0.5:
    then the opposite rule wins, and it leaks just as much. Leak: the interval lies wholly
    beyond THRESHOLD on either side. A `floor` (a user-aware baseline) is flagged when the
    interval's lower end is above EASY: the release is easy, not leaky."""
    if not scores:
        return Probe(name, None, None, None, 0, about)
    lo, hi = wilson(float(sum(scores)), len(scores))  # `seed`: the rule needs none
    flag = lo > EASY if floor else lo > THRESHOLD or hi < 1 - THRESHOLD
    return Probe(name, float(np.mean(scores)), lo, hi, len(scores), about, leak=flag)


def more_wins(a: float, b: float) -> float:
    return 1.0 if a > b else 0.0 if a < b else 0.5
