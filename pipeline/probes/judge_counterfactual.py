"""Judge, counterfactual: the judge sees the user's profile, then a contrasting user's. Of the
pairs the judge favours chosen under the true profile, the share whose advantage survives the
swap (at least as large): won on something other than this user. A leak when that share's
lower end is above 0.5: a release where most preferences do not depend on who the user is."""

from __future__ import annotations

from pipeline.probes._judge import Judge, chosen_points, survival
from pipeline.probes.base import Probe, ProbeSpec

ABOUT = (
    "of the pairs the judge favours chosen under the user's profile, the share that keeps "
    "that advantage under a contrasting user's profile (not personal)"
)
ABOUT_FREE = (
    "of the pairs where chosen's P(yes) is higher under the user's profile, the share whose "
    "margin is as large under a contrasting user's (not personal)"
)


async def asks(rows: list[dict], judge: Judge, seed: int = 0) -> list[Probe]:
    if judge.position_free:
        margins = await judge.margins(("true", "contrast"))
        favoured = [
            m
            for m in margins
            if m.get("true") is not None and m["true"] > 0 and m.get("contrast") is not None
        ]
        return [
            survival(
                "judge, counterfactual, position-free: survives the swap",
                ABOUT_FREE,
                [m["contrast"] >= m["true"] for m in favoured],
            )
        ]
    verdicts = await judge.pairwise(("true", "contrast"))
    pts = [(chosen_points(v, "true"), chosen_points(v, "contrast")) for v in verdicts]
    favoured = [(t, c) for t, c in pts if t is not None and c is not None and t > 0.5]
    return [
        survival("judge, counterfactual: survives the swap", ABOUT, [c >= t for t, c in favoured])
    ]


PROBE = ProbeSpec(
    "judge_counterfactual",
    "judge",
    52,
    None,
    "the judge's preference survives a swap of users (should not)",
    asks=asks,
)
