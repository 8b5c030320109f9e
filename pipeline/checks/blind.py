"""Persona-blind judge: the question and both answers, no profile, asked in both A/B orders. If
it picks the same answer in both orders without knowing the user, the pair leaks general
quality (flagged, and dropped unless `drop_blind_separated: false`). The same letter twice is
position bias, not a preference."""

from __future__ import annotations

from typing import Annotated, Literal

from pipeline.checks.base import Ask, Check, Figure, Released, Report, shown
from pipeline.records import Record


class Settings(Record):
    drop_blind_separated: bool = True  # False: keep such pairs, flagged `blind_separated`


class Result(Record):
    ab: Annotated[str, Released("blind_ab")]  # verdict with chosen shown as A
    ba: Annotated[str, Released("blind_ba")]  # verdict with chosen shown as B
    # consistent pick over both orders
    picked: Annotated[Literal["chosen", "rejected", "none"], Released("blind_picked")]


def ask(order: str) -> Ask:
    return Ask(
        f"blind_{order}",
        "judge_blind",
        lambda pair, _: {"question": pair.task.question, **shown(pair, order)},
    )


def pick(ab: str, ba: str) -> str:
    """ab: verdict with chosen shown as A; ba: with chosen shown as B. Only a pick that survives
    the swap counts."""
    if ab == "A" and ba == "B":
        return "chosen"
    if ab == "B" and ba == "A":
        return "rejected"
    return "none"


def measure(pair, done, _) -> Result | None:
    if "blind_ab" not in done or "blind_ba" not in done:
        return None  # one order failed: no verdict
    ab, ba = done["blind_ab"].value.choice, done["blind_ba"].value.choice
    return Result(ab=ab, ba=ba, picked=pick(ab, ba))


def decide(r: Result, s: Settings) -> list[str]:
    return ["blind_separated"] if s.drop_blind_separated and r.picked != "none" else []


def flags(r: Result) -> list[str]:
    if r.picked != "none":
        return ["blind_separated"]  # leaks general quality
    if r.ab == r.ba != "tie":
        return ["blind_position_bias"]
    return []


def trials(r: Result | None) -> tuple[int, int, int]:
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
    return trials(Result(ab=ab, ba=ba, picked=pick(ab, ba)))


def _part(view: dict, which: int | slice):
    found = released_trials(view)
    return None if found is None else found[which]


CHECK = Check(
    name="blind",
    order=30,
    asks=(ask("ab"), ask("ba")),
    samples={"judge_blind": {"question": "A question?", "answer_a": "One.", "answer_b": "Two."}},
    settings=Settings,
    result=Result,
    measure=measure,
    decide=decide,
    flags=flags,
    report=Report(
        about="persona-blind judge verdicts in both A/B orders",
        docs={
            "drop_blind_separated": "drop pairs a judge without the profile tells apart in both "
            "orders:",
        },
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
                lambda v: (
                    None if v.get("blind_picked") is None else float(v["blind_picked"] != "none")
                ),
                fmt="{:.1%}",
                plot=False,
            ),
        ),
        severity=lambda r: 2 * (r.picked != "none"),
    ),
)
