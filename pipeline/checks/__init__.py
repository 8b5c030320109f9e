"""The checks the filters stage runs: every module of this package that declares a `CHECK`
(see base.py), found here and nowhere else.

Their `order` is how checks are documented and released (card, `pair_checks` columns,
reasons); the filters stage runs them by cost: model-free checks first, then each judge check,
and a pair already dropped meets no later judge unless `filters.evaluate_all` (the auditing
mode, which records every check for every pair).

To add a check: a module here declaring `CHECK` (its name is the module's), and a test; a
judge check adds its prompt file in prompts/ (its output model may live in the module). Its
settings join the config's `filters:` section, its result the filters stage's records (the
fields marked `Released` the release's `pair_checks`), its report's columns the release, its
rule text the card, its figures the audit.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, create_model

from pipeline.checks.base import Call, Check
from pipeline.columns import AFTER_CHECKS, BEFORE_CHECKS
from pipeline.records import Record
from pipeline.registry import Registry

# the filters stage's own settings, after the checks' in the config's `filters:` section
_STAGE_SETTINGS = {
    "evaluate_all": (bool, Field(False, description="run every check on every pair (auditing)")),
    # record: run every check on every pair and keep them all, noting what each check would
    # have dropped (`would_drop`): the published recipe, which had no automatic filter
    "mode": (Literal["drop", "record"], Field("drop", description="drop pairs, or only record")),
    # qualified: the judge checks run only if the judge passed qualification; a judge that
    # failed costs no more calls and decides nothing (a small local model: the model-free
    # floor, the artifact gate and human annotation are the filters), and the card says so
    "judges": (Literal["on", "qualified"], Field("on", description="when the judge checks run")),
}


def claims(check: Check) -> set[str]:
    """What a check puts into the config and the release besides its name: a plugin check that
    declares one a bundled check (or the release itself) holds is refused when it loads."""
    return (
        {f"setting {n!r}" for n in check.settings.model_fields}
        | {f"pair_checks field {n!r}" for n in check.features}
        | {f"column {n!r}" for n in check.report.columns}
    )


_RESERVED = {f"setting {n!r}": "the filters stage" for n in _STAGE_SETTINGS} | {
    f"column {n!r}": "the release schema" for n in (*BEFORE_CHECKS, "pair_checks", *AFTER_CHECKS)
}

# every module here but base.py is a check named after it ("pipeline.checks.NAME:CHECK"), and
# so is every entry point of `prb.checks`; iterated in their documented order
CHECKS: Registry[Check] = Registry(
    "checks",
    Check,
    package=__name__,
    attr="CHECK",
    order=lambda c: (c.order, c.name),
    named=True,
    claims=claims,
    reserved=_RESERVED,
)


def by_cost() -> list[Check]:
    """The order they run in: cheapest first, ties in list order."""
    return sorted(CHECKS, key=lambda c: c.cost)


def tasks() -> tuple[str, ...]:
    """The prompt tasks the checks call."""
    return tuple(dict.fromkeys(t for c in CHECKS for t in c.tasks))


def setting_names() -> list[str]:
    """Every check's settings, thresholds first then switches, each group in list order: the
    order of the config's `filters:` section and of the card's table."""
    fields = [(name, f) for c in CHECKS for name, f in c.settings.model_fields.items()]
    return [n for n, f in fields if f.annotation is not bool] + [
        n for n, f in fields if f.annotation is bool
    ]


class _FilterBase(Record):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # as every config section

    def model_post_init(self, _: object) -> None:
        for check in CHECKS:  # each check's own validators (e.g. min <= max) hold on the whole
            check.settings.model_validate(self.model_dump(include=set(check.settings.model_fields)))


def _settings_model() -> type[Record]:
    fields = {
        c_name: (f.annotation, f) for c in CHECKS for c_name, f in c.settings.model_fields.items()
    }
    ordered = {n: fields[n] for n in setting_names()}
    return create_model("FilterConfig", __base__=_FilterBase, **ordered, **_STAGE_SETTINGS)


# the config's `filters:` section: every check's settings, plus the stage's own switch
FilterConfig = _settings_model()

__all__ = ["CHECKS", "Call", "Check", "FilterConfig", "by_cost", "setting_names", "tasks"]
