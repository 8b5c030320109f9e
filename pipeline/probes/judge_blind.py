"""Judge, persona-blind: the judge sees the question and the two answers, not the user.
Accuracy over both orders (a tie half), and (pairwise) split by chosen shown as A and as B:
position bias shows as a gap. Flagged when the interval lies beyond `THRESHOLD` on either side
of 0.5: general quality separates the pairs."""

from __future__ import annotations

from pipeline.probes._judge import Judge, won
from pipeline.probes.base import Probe, ProbeSpec, rule
from pipeline.records import POINTS


async def asks(rows: list[dict], judge: Judge, seed: int = 0) -> list[Probe]:
    if judge.position_free:
        margins = await judge.margins(("blind",))
        return [
            rule(
                "judge, persona-blind, position-free",
                "each answer alone without the user: P(yes) from logprobs, chosen higher",
                [won(m["blind"]) for m in margins if m.get("blind") is not None],
                seed,
            )
        ]
    verdicts = await judge.pairwise(("blind",))
    as_a = [POINTS[v["blind_ab"]] for v in verdicts if v.get("blind_ab")]
    as_b = [1.0 - POINTS[v["blind_ba"]] for v in verdicts if v.get("blind_ba")]
    out = []
    for name, scores, about in (
        ("judge, persona-blind", as_a + as_b, "a pairwise judge without the user, both orders"),
        ("judge, persona-blind, chosen as A", as_a, "chosen shown first"),
        ("judge, persona-blind, chosen as B", as_b, "chosen shown second"),
    ):
        found = rule(name, about, scores, seed)  # off 0.5 either way: general quality separates
        if name != "judge, persona-blind":
            found.leak = None  # the position splits: information
        out.append(found)
    return out


PROBE = ProbeSpec(
    "judge_blind", "judge", 51, None, "the judge without the user: 0.5 expected", asks=asks
)
