"""The checks' own figures (each check declares them: `Figure` in pipeline/checks/base.py),
measured over pairs. One reader for a prb run's filter records and for any release's rows, so
`prb audit` and `prb compare` show a new check without naming it."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from pipeline.checks import CHECKS
from pipeline.checks.base import Check, Figure
from pipeline.records import FilterRecord
from pipeline.stats import wilson


def declared() -> list[tuple[Check, Figure]]:
    return [(c, f) for c in CHECKS for f in c.report.figures]


def in_breakdowns() -> set[str]:
    return {f.key for _, f in declared() if f.breakdown}


def of_record(record: FilterRecord) -> dict[str, Any]:
    """A filtered pair's figures, by figure key (a check that did not run leaves none)."""
    out: dict[str, Any] = {}
    for check in CHECKS:
        result = check.read(record) if check.report.figures else None
        if result is not None:
            view = check.view(result)
            out |= {f.key: f.value(view) for f in check.report.figures}
    return out


def of_row(row: dict) -> dict[str, Any]:
    """A released row's figures, from the columns the checks release."""
    out: dict[str, Any] = {}
    for check in CHECKS:
        view = check.row_view(row) if check.report.figures else None
        if view is not None:
            out |= {f.key: _safe(f, view) for f in check.report.figures}
    return out


def _safe(figure: Figure, view: dict) -> Any:
    try:  # a foreign release's column may hold anything
        return figure.value(view)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def show(figure: Figure, value: Any) -> str:
    """One pair's value, as the worst-pairs table shows it."""
    if value is None:
        return "–"
    if figure.summary == "share":
        return f"{value[0]}/{value[1]}"
    if figure.summary == "sides":
        return f"{figure.fmt.format(value[0])} / {figure.fmt.format(value[1])}"
    return figure.fmt.format(float(value))


def summarize(figure: Figure, values: Iterable[Any]) -> dict:
    """The figure over pairs: value (and for `share` its Wilson interval and k/n; for `sides`
    each side's mean), how many pairs it rests on, its text, and whether it is out of line."""
    vals = [v for v in values if v is not None]
    out = {
        "key": figure.key,
        "label": figure.label,
        "summary": figure.summary,
        "pairs": len(vals),
        "value": None,
        "low": None,
        "high": None,
        "text": "–",
        "warn": False,
    }
    if not vals:
        return out
    if figure.summary == "share":
        k, n = sum(v[0] for v in vals), sum(v[1] for v in vals)
        out.update(k=k, n=n)
        if n:
            lo, hi = wilson(k, n)
            out.update(value=round(k / n, 4), low=round(lo, 4), high=round(hi, 4))
            out["text"] = (
                f"{figure.fmt.format(k / n)} [{figure.fmt.format(lo)}, "
                f"{figure.fmt.format(hi)}] ({k}/{n})"
            )
    elif figure.summary == "sides":
        chosen = statistics.fmean(float(v[0]) for v in vals)
        rejected = statistics.fmean(float(v[1]) for v in vals)
        out.update(
            chosen=round(chosen, 4), rejected=round(rejected, 4), value=round(chosen - rejected, 4)
        )
        out["text"] = f"chosen {figure.fmt.format(chosen)}, rejected {figure.fmt.format(rejected)}"
    else:
        pick = statistics.median if figure.summary == "median" else statistics.fmean
        out["value"] = round(pick(float(v) for v in vals), 4)
        out["text"] = figure.fmt.format(out["value"])
    if figure.expect is not None and out["value"] is not None:
        lo, hi = (out["low"], out["high"]) if figure.summary == "share" else (out["value"],) * 2
        out["warn"] = hi < figure.expect[0] or lo > figure.expect[1]
    return out


def summarize_all(per_pair: list[dict[str, Any]]) -> list[dict]:
    """Every declared figure some pair has, over those pairs."""
    out = []
    for _, figure in declared():
        values = [p.get(figure.key) for p in per_pair]
        if any(v is not None for v in values):
            out.append(summarize(figure, values))
    return out


def warnings(subset: str, summaries: list[dict]) -> list[str]:
    by_key = {f.key: f for _, f in declared()}
    out = []
    for s in summaries:
        if s["warn"]:
            f = by_key[s["key"]]
            lo, hi = f.expect
            where = f.fmt.format(lo) if lo == hi else f"{f.fmt.format(lo)}–{f.fmt.format(hi)}"
            out.append(
                f"{s['label']} on {subset} pairs: {s['text']}, "
                f"{'its interval excludes' if s['summary'] == 'share' else 'outside'} "
                f"{where}: {f.warning}"
            )
    return out
