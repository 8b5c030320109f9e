"""Contrasting users: for a pair, another user whose preferences conflict with the pair's own,
picked deterministically. Used by the counterfactual check (pipeline/checks/counterfactual.py)
and the judge probes of `prb audit --judge` (pipeline/probes/_judge.py).

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


def _similarity(a: User, b: User, weights: dict[str, int] | None = None) -> float:
    """Lower is more contrasting: minus the conflicting dimensions where both have levels
    (each counting its weight, 1 unless `weights` says), else the Jaccard similarity of their
    aspects' words."""
    shared = set(a.levels) & set(b.levels)
    if shared:
        return -sum((weights or {}).get(d, 1) for d in shared if a.levels[d] != b.levels[d])
    wa, wb = _words(a.aspects), _words(b.aspects)
    return len(wa & wb) / len(wa | wb) if wa | wb else 1.0


def partners(users: dict[str, User], weights: dict[str, int] | None = None) -> dict[str, User]:
    """item id -> a contrasting user, chosen so that users contrast in mutual couples: the most
    conflicting couples of a category first (a dimension counting its weight: the rewrite
    design weighs the dimensions a rewrite can realise above the rest), each user in one
    couple. Every user is then somebody's contrast about as often as they are themselves (no
    user that many others contrast with), so across a release each user's answers are as often
    `rejected` as they are `chosen`. A user left over (an odd count) gets its best contrast."""
    by_key: dict[str, User] = {}
    for u in users.values():
        by_key.setdefault(u.key, u)
    mate: dict[str, User] = {}
    for category in sorted({u.category for u in by_key.values()}):
        own = sorted((u for u in by_key.values() if u.category == category), key=lambda u: u.key)
        couples = _couples_by_levels(own, weights)
        if couples is None:  # users without comparable levels: every couple's Jaccard
            couples = _couples_by_ranking(own, weights)
        mate.update({a: by_key[b] for a, b in couples.items()})
    left = {item: u for item, u in users.items() if u.key not in mate}
    best = contrasts(users, left) if left else {}
    return {
        item: mate.get(u.key) or best[item]
        for item, u in users.items()
        if u.key in mate or item in best
    }


def _couples_by_ranking(own: list[User], weights: dict[str, int] | None) -> dict[str, str]:
    """Greedy couples over every pair of a category, least similar first (ties by keys)."""
    ranked = sorted(
        (_similarity(a, b, weights), a.key, b.key) for i, a in enumerate(own) for b in own[i + 1 :]
    )
    mate: dict[str, str] = {}
    for _, a, b in ranked:
        if a not in mate and b not in mate:
            mate[a], mate[b] = b, a
    return mate


def _couples_by_levels(own: list[User], weights: dict[str, int] | None) -> dict[str, str] | None:
    """The couples `_couples_by_ranking` makes, without ranking every pair: where every two
    users share a preference dimension, similarity depends only on the two users' levels, and
    a category of 17,000 users has fewer than a hundred distinct ones. For each similarity,
    most conflicting first, each free user in key order takes the first free user after it
    among the levels at that similarity: the order of the full ranking (similarity, then
    keys), so the same couples. None where some two users share no dimension."""
    from bisect import bisect_right

    signature = {u.key: tuple(sorted(u.levels.items())) for u in own}
    keys: dict[tuple, list[str]] = {}  # levels -> its users' keys, sorted (own is)
    for u in own:
        keys.setdefault(signature[u.key], []).append(u.key)
    table: dict[tuple, dict[int, list[tuple]]] = {}  # levels -> similarity -> levels
    for x in keys:
        for y in keys:
            dx, dy = dict(x), dict(y)
            shared = dx.keys() & dy.keys()
            if not shared:
                return None
            sim = -sum((weights or {}).get(d, 1) for d in shared if dx[d] != dy[d])
            table.setdefault(x, {}).setdefault(sim, []).append(y)
    # the first free index at or after i in a levels' key list (taken ones point past)
    after: dict[tuple, list[int]] = {y: list(range(len(k) + 1)) for y, k in keys.items()}

    def free(y: tuple, i: int) -> int:
        nxt = after[y]
        root = i
        while nxt[root] != root:
            root = nxt[root]
        while nxt[i] != root:
            nxt[i], i = root, nxt[i]
        return root

    index = {k: i for k_list in keys.values() for i, k in enumerate(k_list)}
    mate: dict[str, str] = {}

    def take(key: str) -> None:
        after[signature[key]][index[key]] = index[key] + 1

    for sim in sorted({s for row in table.values() for s in row}):
        for u in own:
            a = u.key
            if a in mate:
                continue
            best = None
            for y in table[signature[a]].get(sim, ()):
                k = keys[y]
                j = free(y, bisect_right(k, a))
                if j < len(k) and (best is None or k[j] < best):
                    best = k[j]
            if best is not None:
                mate[a], mate[best] = best, a
                take(a)
                take(best)
    return mate


def contrasts(users: dict[str, User], items: dict[str, User] | None = None) -> dict[str, User]:
    """item id -> the contrasting user for that item's user (absent: nobody else to pick),
    for every item of `users`, or only for `items` (the candidates are always all users)."""
    by_key = {}
    for u in users.values():
        by_key.setdefault(u.key, u)
    out = {}
    for item, u in (users if items is None else items).items():
        others = [o for o in by_key.values() if o.key != u.key]
        same = [o for o in others if o.category == u.category] or others
        if same:
            out[item] = min(same, key=lambda o: (_similarity(u, o), o.key))
    return out
