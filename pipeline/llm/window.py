"""Fitting a prompt into a model's context window: the one rule every judge and reward model
follows. The question and the answers always go in whole; the user context (posts, best first,
one per line) is cut by whole lines from its end; a prompt that does not fit even with no
context is refused, counted, never sent."""

from __future__ import annotations


def truncation_counts() -> dict[str, int]:
    """A model's truncation figures: contexts seen, cut, tokens cut, too long to fit at all."""
    return {"contexts": 0, "cut": 0, "tokens_cut": 0, "too_long": 0}


def fit_context(context: str, size, budget: int, counts: dict) -> str | None:
    """The user context cut by whole lines from its end (posts come best first) until
    `size(context)` fits `budget`; None if it does not fit even empty. `counts` (a model's
    truncation_counts) is updated."""
    counts["contexts"] += 1
    full = size(context)
    if full <= budget:
        return context
    fitted, kept = "", size("")
    if kept > budget:
        counts["too_long"] += 1
        return None
    lines = context.split("\n")
    lo, hi = 0, len(lines)  # the most lines that fit: binary search on the prefix
    while lo < hi:
        mid = (lo + hi + 1) // 2
        trial = "\n".join(lines[:mid])
        if (n := size(trial)) <= budget:
            lo, fitted, kept = mid, trial, n
        else:
            hi = mid - 1
    counts["cut"] += 1
    counts["tokens_cut"] += full - kept
    return fitted
