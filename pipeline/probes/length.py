"""Length: the longer (or shorter) answer wins; the share of pairs whose chosen is longer; the
median rejected/chosen word ratio, a leak outside stats.LENGTH_BAND."""

from __future__ import annotations

import statistics

import numpy as np

from pipeline.probes.base import Probe, ProbeSpec, more_wins, rule
from pipeline.stats import LENGTH_BAND, bootstrap, wilson, words


def length_probes(rows: list[dict], seed: int = 0) -> list[Probe]:
    lengths = [(len(words(r["chosen"])), len(words(r["rejected"]))) for r in rows]
    longer = [1.0 if c > r else 0.0 for c, r in lengths]
    ratios = [r / max(1, c) for c, r in lengths]
    med = statistics.median(ratios)
    lo, hi = bootstrap(ratios, seed, stat=np.median)
    band = LENGTH_BAND
    longer_wins = [more_wins(c, r) for c, r in lengths]
    return [
        rule(
            "length: longer wins",
            "the longer answer is taken as chosen (below 0.5: the shorter wins)",
            longer_wins,
            seed,
        ),
        Probe(
            "length: chosen is longer",
            float(np.mean(longer)),
            *wilson(sum(longer), len(longer)),
            len(rows),
            "share of pairs whose chosen answer has more words (information)",
            kind="share",
        ),
        Probe(
            "length: median rejected/chosen ratio",
            med,
            lo,
            hi,
            len(rows),
            f"median of rejected words / chosen words; a leak outside {band[0]}-{band[1]}",
            leak=not band[0] <= med <= band[1],
            kind="ratio",
        ),
    ]


PROBE = ProbeSpec("length", "leakage", 10, length_probes, "the longer or shorter answer wins")
