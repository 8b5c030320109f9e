"""Persona-blind judge: the question and both answers, no profile, asked in both A/B orders. If
it picks the same answer in both orders without knowing the user, the pair leaks general
quality (flagged, and dropped unless `drop_blind_separated: false`). The same letter twice is
position bias, not a preference."""

from __future__ import annotations

from pipeline.checks.base import Call, Check, Figure
from pipeline.records import BlindCheck, Record


class Settings(Record):
    drop_blind_separated: bool = True  # False: keep such pairs, flagged `blind_separated`


def calls(pair) -> list[Call]:
    q = pair.task.question
    return [
        Call(
            "blind_ab",
            "judge_blind",
            {"question": q, "answer_a": pair.chosen, "answer_b": pair.rejected},
        ),
        Call(
            "blind_ba",
            "judge_blind",
            {"question": q, "answer_a": pair.rejected, "answer_b": pair.chosen},
        ),
    ]


def pick(ab: str, ba: str) -> str:
    """ab: verdict with chosen shown as A; ba: with chosen shown as B. Only a pick that survives
    the swap counts."""
    if ab == "A" and ba == "B":
        return "chosen"
    if ab == "B" and ba == "A":
        return "rejected"
    return "none"


def measure(pair, done, _) -> BlindCheck | None:
    if "blind_ab" not in done or "blind_ba" not in done:
        return None  # one order failed: no verdict
    ab, ba = done["blind_ab"].value.choice, done["blind_ba"].value.choice
    return BlindCheck(ab=ab, ba=ba, picked=pick(ab, ba))


def decide(r: BlindCheck, s: Settings) -> list[str]:
    return ["blind_separated"] if s.drop_blind_separated and r.picked != "none" else []


def flags(r: BlindCheck) -> list[str]:
    if r.picked != "none":
        return ["blind_separated"]  # leaks general quality
    if r.ab == r.ba != "tie":
        return ["blind_position_bias"]
    return []


def trials(r: BlindCheck | None) -> tuple[int, int, int]:
    """(picked chosen, decisive verdicts, ties) over the pair's two orders."""
    k = n = ties = 0
    for verdict, chosen_letter in ((r.ab, "A"), (r.ba, "B")) if r else ():
        if verdict == "tie":
            ties += 1
        else:
            n += 1
            k += verdict == chosen_letter
    return k, n, ties


def released_trials(view: dict) -> tuple[int, int, int] | None:
    ab, ba = view.get("blind_ab"), view.get("blind_ba")
    if ab not in ("A", "B", "tie") or ba not in ("A", "B", "tie"):
        return None
    return trials(BlindCheck(ab=ab, ba=ba, picked=pick(ab, ba)))


def _part(view: dict, which: int | slice):
    found = released_trials(view)
    return None if found is None else found[which]


CHECK = Check(
    name="blind",
    order=30,
    cost=2,
    tasks=("judge_blind",),
    samples={"judge_blind": {"question": "A question?", "answer_a": "One.", "answer_b": "Two."}},
    settings=Settings,
    result=BlindCheck,
    calls=calls,
    call_names=("blind_ab", "blind_ba"),
    measure=measure,
    decide=decide,
    flags=flags,
    about="persona-blind judge verdicts in both A/B orders",
    docs={
        "drop_blind_separated": "drop pairs a judge without the profile tells apart in both "
        "orders:",
    },
    features={
        "blind_ab": "string",
        "blind_ba": "string",
        "blind_picked": "string",
    },
    released=lambda r: {"blind_ab": r.ab, "blind_ba": r.ba, "blind_picked": r.picked},
    figures=(
        Figure(
            "blind",
            "persona-blind judge picks chosen (decisive verdicts, both orders)",
            lambda v: _part(v, slice(0, 2)),
            "share",
            fmt="{:.1%}",
            expect=(0.5, 0.5),
            warning="the answers differ in general quality, not only in personal fit",
            breakdown=True,
        ),
        Figure(
            "blind_ties",
            "persona-blind ties per pair (of 2 orders)",
            lambda v: _part(v, 2),
            plot=False,
        ),
        Figure(
            "blind_separated",
            "pairs the blind judge tells apart in both orders",
            lambda v: None if v.get("blind_picked") is None else float(v["blind_picked"] != "none"),
            fmt="{:.1%}",
            plot=False,
        ),
    ),
    severity=lambda r: 2 * (r.picked != "none"),
)
