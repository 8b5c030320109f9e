"""Judge, 2x2 swap: for a pair whose rejected answer was written for another user, each answer
should be preferred under its own user — chosen with the user's profile, rejected with the
profile of the user it was written for. A pair scores the mean of the two (1: both ways, 0.5:
one way or ties, 0: neither); flagged when the interval's upper end is below `SWAP` (0.6): the
answers do not fit the users they were written for. Pairs whose rejected answer was written
for no one in particular (the instructed strategies) are not asked."""

from __future__ import annotations

from pipeline.probes._judge import Judge, chosen_points, won
from pipeline.probes.base import Probe, ProbeSpec, rule

SWAP = 0.6


async def asks(rows: list[dict], judge: Judge, seed: int = 0) -> list[Probe]:
    mine = [r for r in rows if r["id"] in judge.written_for]
    if judge.position_free:
        name = "judge, swap 2x2, position-free: each answer preferred by its own user"
        margins = await judge.margins(("true", "contrast"), mine)
        scores = [
            (won(m["true"]) + won(-m["contrast"])) / 2
            for m in margins
            if m.get("true") is not None and m.get("contrast") is not None
        ]
    else:
        name = "judge, swap 2x2: each answer preferred by its own user"
        verdicts = await judge.pairwise(("true", "contrast"), mine)
        pts = [(chosen_points(v, "true"), chosen_points(v, "contrast")) for v in verdicts]
        scores = [(t + 1.0 - c) / 2 for t, c in pts if t is not None and c is not None]
    about = (
        "chosen preferred with the user's profile and rejected with the profile of the user "
        "it was written for, both orders (should be high)"
    )
    found = rule(name, about, scores, seed)
    if found.value is not None:  # flagged when too low, not when far from 0.5
        found.leak = found.high < SWAP
    return [found]


PROBE = ProbeSpec(
    "judge_swap",
    "judge",
    53,
    None,
    "each answer preferred by the user it was written for",
    asks=asks,
)
