"""Counterfactual persona check (a judge, off by default: `filters.counterfactual: true`).

A pairwise judge compares the pair, in both A/B orders, under the user's own profile and again
under a contrasting user's (pipeline/contrast.py: the same category, conflicting preferences).
Chosen's advantage is its points over the two orders (a win 1, a tie 0.5). A pair is personal
only if that advantage shrinks or flips under the contrasting profile; one whose advantage holds
(at least as large, and more than half the points under the true profile) is won on something
other than this user: dropped as `counterfactual_not_personal`. Four calls per pair.
"""

from __future__ import annotations

from typing import Annotated

from pipeline.checks.base import Ask, Check, Figure, Released, Report, both, shown
from pipeline.contrast import User, contrasts
from pipeline.records import Record, advantage


class Settings(Record):
    counterfactual: bool = False  # four judge calls per pair: an opt-in


class Result(Record):
    contrast_user: Annotated[str, Released()]
    true_ab: str  # verdicts with chosen shown as A / as B, under the true profile
    true_ba: str
    contrast_ab: str
    contrast_ba: str
    advantage_true: Annotated[float, Released()]  # chosen's points over both orders, 0-2
    advantage_contrast: Annotated[float, Released()]


def profile_text(profile) -> str:
    return "\n".join(f"[{p.id}] {p.text}" for p in profile)


def prepare(pairs, cfg) -> dict[str, User]:
    users = {
        p.pair_id: User(
            key=p.task.persona.persona_id,
            category=p.task.persona.category,
            aspects=" ".join(a.aspect for a in p.rubric_aspects),
            levels={f.dimension: f.level for f in p.task.persona.preferences},
            profile=p.task.persona.profile,
        )
        for p in pairs
    }
    return contrasts(users)


def ask(who: str, order: str) -> Ask:
    """A verdict under the user's own profile (`true`) or the contrasting user's, in one order."""

    def variables(pair, contrast: dict[str, User] | None) -> dict | None:
        other = (contrast or {}).get(pair.pair_id)
        if other is None:
            return None  # nobody to contrast with: none of the four calls
        profile = pair.task.persona.profile if who == "true" else other.profile
        return {
            "user_context": profile_text(profile),
            "question": pair.task.question,
            **shown(pair, order),
        }

    return Ask(f"cf_{who}_{order}", "rm_pairwise", variables)


def measure(pair, done, contrast) -> Result | None:
    names = ("cf_true_ab", "cf_true_ba", "cf_contrast_ab", "cf_contrast_ba")
    if any(n not in done for n in names):
        return None  # switched off, nobody to contrast with, or a call failed
    v = {n: done[n].value.choice for n in names}
    return Result(
        contrast_user=contrast[pair.pair_id].key,
        true_ab=v["cf_true_ab"],
        true_ba=v["cf_true_ba"],
        contrast_ab=v["cf_contrast_ab"],
        contrast_ba=v["cf_contrast_ba"],
        advantage_true=advantage(v["cf_true_ab"], v["cf_true_ba"]),
        advantage_contrast=advantage(v["cf_contrast_ab"], v["cf_contrast_ba"]),
    )


def not_personal(r: Result) -> bool:
    return r.advantage_true > 1.0 and r.advantage_contrast >= r.advantage_true


CHECK = Check(
    name="counterfactual",
    order=25,
    asks=tuple(ask(who, order) for who in ("true", "contrast") for order in ("ab", "ba")),
    samples={
        "rm_pairwise": {
            "user_context": "[p1] A sample post.",
            "question": "A question?",
            "answer_a": "One.",
            "answer_b": "Two.",
        }
    },
    settings=Settings,
    result=Result,
    enabled=lambda s: s.counterfactual,
    prepare=prepare,
    measure=measure,
    decide=lambda r, s: ["counterfactual_not_personal"] if not_personal(r) else [],
    report=Report(
        about="a pairwise judge under the user's profile and under a contrasting user's "
        "(chosen's advantage over both orders, 0-2, under each)",
        docs={
            "counterfactual": "drop pairs whose chosen keeps its advantage under a contrasting "
            "user's profile (four judge calls per pair):"
        },
        figures=(
            Figure(
                "counterfactual_survival",
                "chosen keeps its advantage under a contrasting user",
                lambda v: (
                    None
                    if v.get("advantage_true") is None
                    else float(
                        v["advantage_true"] > 1.0 and v["advantage_contrast"] >= v["advantage_true"]
                    )
                ),
                fmt="{:.1%}",
                plot=False,
                breakdown=True,
            ),
            Figure(
                "counterfactual",
                "chosen's advantage (0–2): true user, contrasting user",
                both("advantage_true", "advantage_contrast"),
                "sides",
            ),
        ),
        severity=lambda r: 2.0 * not_personal(r),
    ),
)
