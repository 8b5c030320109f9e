"""The statistics every probe, check, baseline and leaderboard uses, written once: a probe and
the baseline it guards must count alike (the length probe and the length reward model read the
same word count), and every interval is computed the same way.

A leaf: numpy and statsmodels only.
"""

from __future__ import annotations

import math
import re

import numpy as np

# a word: letters, with inner apostrophes and hyphens; list markers, numbers and punctuation are
# not words (a bulleted answer and the same text as prose have the same length)
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")

THRESHOLD = 0.55  # a probe leaks when the lower end of its 95% interval is above this
# a shallow user-aware baseline (profile overlap, BM25) makes a release "easy" when the lower end
# of its interval is above this: a reward model must beat word matching by a margin to count
EASY = 0.60
LENGTH_BAND = (0.85, 1.15)  # the median rejected/chosen word ratio outside this: a leak
MIN_VERDICT_PAIRS = 100  # no verdict from fewer pairs: a 95% interval is then ±0.1 or wider
N_RESAMPLES = 1000


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


def bootstrap(
    values, seed: int = 0, stat=np.mean, n_resamples: int = N_RESAMPLES
) -> tuple[float, float]:
    """Percentile-bootstrap 95% interval of `stat` over `values`; NaN for fewer than two."""
    arr = np.asarray(values, dtype=float)
    if len(arr) < 2:
        return math.nan, math.nan
    if np.all(arr == arr[0]):  # every resample gives the same value
        return float(arr[0]), float(arr[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(arr), size=(n_resamples, len(arr)))
    vals = stat(arr[idx], axis=1)
    return float(np.percentile(vals, 2.5)), float(np.percentile(vals, 97.5))


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval of a proportion k/n (NaN when n is 0)."""
    if n == 0:
        return math.nan, math.nan
    from statsmodels.stats.proportion import proportion_confint

    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)
