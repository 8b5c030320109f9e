"""Judge, persona-aware: with the user's profile the judge should pick chosen (a high floor);
flagged when the interval's upper end is below `AWARE` (0.9): the pairs do not encode what
the user wants."""

from __future__ import annotations

from pipeline.probes._judge import AWARE, Judge, by_difference, chosen_points, won
from pipeline.probes.base import Probe, ProbeSpec, rule
from pipeline.records import POINTS


async def asks(rows: list[dict], judge: Judge, seed: int = 0) -> list[Probe]:
    if judge.position_free:
        margins = await judge.margins(("true",))
        per_row = [None if m.get("true") is None else won(m["true"]) for m in margins]
        found = rule(
            "judge, persona-aware, position-free",
            "each answer alone with the user's profile: P(yes) from logprobs, chosen higher "
            "(should be high)",
            [x for x in per_row if x is not None],
            seed,
        )
    else:
        verdicts = await judge.pairwise(("true",))
        scores = [POINTS[v["true_ab"]] for v in verdicts if v.get("true_ab")] + [
            1.0 - POINTS[v["true_ba"]] for v in verdicts if v.get("true_ba")
        ]
        about = "a pairwise judge with the user's profile, both orders (should be high)"
        found = rule("judge, persona-aware", about, scores, seed)
        per_row = [chosen_points(v, "true") for v in verdicts]
    if found.value is not None:  # flagged when too low, not when far from 0.5
        found.leak = found.high < AWARE
    return [found, *by_difference(found, judge.rows, per_row, seed)]


PROBE = ProbeSpec(
    "judge_aware", "judge", 50, None, "the judge with the user's profile picks chosen", asks=asks
)
