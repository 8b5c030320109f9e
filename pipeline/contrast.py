"""Contrasting users: for a pair, another user whose preferences conflict with the pair's own,
picked deterministically. Used by the counterfactual check (pipeline/checks/counterfactual.py)
and the counterfactual probe of `prb audit --judge` (pipeline/audit/judge_probes.py).

Conflict, where the users come from prb's library, is read off the taxonomy: two users
conflict on a preference dimension (expertise, format, tone, ...) where both have a level and
the levels differ; the contrasting user is the one of the same category with the most such
dimensions. Where users have no levels (imported users, other releases), it is the user of the
same category whose rubric aspects share the fewest words with the pair's. Ties go to the
smallest id, so the same release always gives the same contrasts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_WORD = re.compile(r"[a-z]{3,}")


@dataclass(frozen=True)
class User:
    key: str  # who: a persona id or a profile hash
    category: str
    aspects: str  # the pair's rubric aspects, as text
    levels: dict[str, str]  # preference dimension -> level (empty if unknown)
    profile: object  # what a judge is shown as this user's profile


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _similarity(a: User, b: User) -> float:
    """Lower is more contrasting: minus the conflicting dimensions where both have levels,
    else the Jaccard similarity of their aspects' words."""
    shared = set(a.levels) & set(b.levels)
    if shared:
        return -sum(a.levels[d] != b.levels[d] for d in shared)
    wa, wb = _words(a.aspects), _words(b.aspects)
    return len(wa & wb) / len(wa | wb) if wa | wb else 1.0


def partners(users: dict[str, User]) -> dict[str, User]:
    """item id -> a contrasting user, chosen so that users contrast in mutual couples: the most
    conflicting couples of a category first, each user in one couple. Every user is then
    somebody's contrast about as often as they are themselves (no user that many others
    contrast with), so across a release each user's answers are as often `rejected` as they
    are `chosen`. A user left over (an odd count) gets its best contrast."""
    by_key: dict[str, User] = {}
    for u in users.values():
        by_key.setdefault(u.key, u)
    ranked = sorted(
        (_similarity(a, b), a.key, b.key)
        for a in by_key.values()
        for b in by_key.values()
        if a.key < b.key and a.category == b.category
    )
    mate: dict[str, User] = {}
    for _, a, b in ranked:
        if a not in mate and b not in mate:
            mate[a], mate[b] = by_key[b], by_key[a]
    best = contrasts(users)
    return {
        item: mate.get(u.key) or best[item]
        for item, u in users.items()
        if u.key in mate or item in best
    }


def contrasts(users: dict[str, User]) -> dict[str, User]:
    """item id -> the contrasting user for that item's user (absent: nobody else to pick)."""
    by_key = {}
    for u in users.values():
        by_key.setdefault(u.key, u)
    out = {}
    for item, u in users.items():
        others = [o for o in by_key.values() if o.key != u.key]
        same = [o for o in others if o.category == u.category] or others
        if same:
            out[item] = min(same, key=lambda o: (_similarity(u, o), o.key))
    return out
