"""The statistics every probe, check, baseline and leaderboard uses, written once: a probe and
the baseline it guards must count alike (the length probe and the length reward model read the
same word count), and every interval is computed the same way.

Imports only pipeline.text (the one word tokenizer), numpy and statsmodels.
"""

from __future__ import annotations

import math

import numpy as np

from pipeline.text import word_count, words  # noqa: F401  (the one word tokenizer)

THRESHOLD = 0.55  # a probe leaks when the lower end of its 95% interval is above this
# a shallow user-aware baseline (profile overlap, BM25) makes a release "easy" when the lower end
# of its interval is above this: a reward model must beat word matching by a margin to count
EASY = 0.60
LENGTH_BAND = (0.85, 1.15)  # the median rejected/chosen word ratio outside this: a leak
MIN_VERDICT_PAIRS = 100  # no verdict from fewer pairs: a 95% interval is then ±0.1 or wider
N_RESAMPLES = 1000


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


def wilson(k: float, n: int) -> tuple[float, float]:
    """Wilson 95% interval of a proportion k/n (NaN when n is 0). Honest at 0 and 1, where a
    bootstrap collapses to a point (90 pairs at 1.000 read "1.000-1.000"); k may count ties as
    halves."""
    if n == 0:
        return math.nan, math.nan
    z = 1.959963984540054
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, center - half), min(1.0, center + half)
