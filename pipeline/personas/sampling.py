"""Sampling personas: seeded, stratified by category and spread over preference levels.

A large pool is scanned as `PoolPersona`s (id, category, preference levels, where the record
lies); only the picks are read back whole (bench/scale.py: a 50,000-persona pool costs ids and
levels, not records).
"""

from __future__ import annotations

import heapq
import json
import logging
import random
import sys
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import NamedTuple, TypeVar

from pipeline.personas.files import (
    PersonaFileError,
    data_files,
    jsonl_records,
    parse_record,
    read_records,
)
from pipeline.records import Persona

log = logging.getLogger("prb.personas")
P = TypeVar("P")  # a Persona or a PoolPersona: the sampler reads id, category and levels


class PoolLevel(NamedTuple):
    dimension: str
    level: str


class PoolPersona(NamedTuple):
    """What the sampler reads of a library persona; the full record stays on disk until
    picked, so a pool of 50,000 costs ids and levels, not records (bench/scale.py)."""

    persona_id: str
    category: str
    preferences: tuple[PoolLevel, ...]
    path: Path
    lineno: int
    at: int  # JSONL: the line's byte offset; YAML/JSON: the record's position in the file


def _records_at(path: Path) -> Iterator[tuple[int, int, dict]]:
    """(line, position, record) of one persona file; the first unreadable record raises."""
    if path.suffix != ".jsonl":
        for at, (lineno, obj) in enumerate(read_records(path)):
            yield lineno, at, obj
        return
    try:
        for lineno, at, obj, problem in jsonl_records(path):
            if problem:
                raise PersonaFileError(problem)
            yield lineno, at, obj
    except OSError as e:
        raise PersonaFileError(f"{path}: cannot read: {e}") from None


def scan_pool(paths: Iterable[str | Path]) -> list[PoolPersona]:
    """Every persona of the library files, validated as a whole record, kept as a PoolPersona."""
    paths = list(paths)
    pool = []
    for f in data_files(paths):
        for lineno, at, obj in _records_at(f):
            p = parse_record(f, lineno, obj, Persona)
            levels = tuple(
                PoolLevel(sys.intern(x.dimension), sys.intern(x.level)) for x in p.preferences
            )
            pool.append(PoolPersona(p.persona_id, p.category, levels, f, lineno, at))
    if not pool:
        raise PersonaFileError(f"no personas found in {', '.join(map(str, paths))}")
    return pool


def read_back(picks: Iterable[PoolPersona]) -> Iterator[Persona]:
    """The whole records of `picks`, in their order: a JSONL line by its byte offset, other
    files (small, hand-written YAML/JSON) from their parsed list."""
    parsed: dict[Path, list[tuple[int, dict]]] = {}
    with ExitStack() as stack:
        handles = {}
        for pick in picks:
            if pick.path.suffix == ".jsonl":
                if pick.path not in handles:
                    handles[pick.path] = stack.enter_context(open(pick.path, "rb"))
                f = handles[pick.path]
                f.seek(pick.at)
                try:
                    obj = json.loads(f.readline())
                except ValueError:
                    obj = None
            else:
                if pick.path not in parsed:
                    parsed[pick.path] = read_records(pick.path)
                found = parsed[pick.path]
                obj = found[pick.at][1] if pick.at < len(found) else None
            if not isinstance(obj, dict) or obj.get("persona_id") != pick.persona_id:
                raise PersonaFileError(
                    f"{pick.path}:{pick.lineno}: changed while the build was reading it "
                    f"(expected persona {pick.persona_id!r}); run the build again"
                )
            yield parse_record(pick.path, pick.lineno, obj, Persona)


def sample_personas(
    personas: Sequence[P], categories: list[str], per_category: int | None, seed: int
) -> list[P]:
    """`per_category` personas from each category (None: all of them), the same for the same
    seed.

    Within a category each next persona is the one whose preference levels are least covered
    by the sample so far (then whose dimensions are), so the sample spreads over contradicting
    levels of every dimension instead of clustering; ties keep a seeded shuffle order.
    `personas` are Persona records or the sampler's PoolPersona view of them.
    """
    rng = random.Random(f"personas:{seed}")
    out: list[Persona] = []
    for category in categories:
        pool = sorted((p for p in personas if p.category == category), key=lambda p: p.persona_id)
        if not pool:
            raise PersonaFileError(f"no personas of category {category!r} in the source")
        want = per_category or len(pool)
        if per_category and len(pool) < per_category:
            log.warning(
                "only %d personas of %s for per_category=%d", len(pool), category, per_category
            )
        rng.shuffle(pool)
        levels: Counter[tuple[str, str]] = Counter()
        dims: Counter[str] = Counter()

        def crowding(p: Persona, levels=levels, dims=dims) -> tuple[float, float]:
            n = max(1, len(p.preferences))
            return (
                sum(levels[(x.dimension, x.level)] for x in p.preferences) / n,
                sum(dims[x.dimension] for x in p.preferences) / n,
            )

        # Lazy greedy over groups: crowding depends only on a persona's preference levels, so
        # personas that share them form one heap entry keyed by the group's next persona in
        # shuffle order. A group's crowding only grows as the sample fills, so a stale key is a
        # lower bound; re-score the top and take it if it still beats the next key. Picks are
        # exactly those of the plain greedy (min by crowding, then shuffle order), and 50,000
        # personas built from a few hundred profiles take seconds, not hours.
        members: dict[tuple, deque[int]] = {}
        for i, p in enumerate(pool):
            key = tuple(sorted((x.dimension, x.level) for x in p.preferences))
            members.setdefault(key, deque()).append(i)
        heap = [(crowding(pool[q[0]]), q[0], key) for key, q in members.items()]
        heapq.heapify(heap)
        taken = 0
        while heap and taken < want:
            _, i, key = heapq.heappop(heap)
            fresh = (crowding(pool[i]), i, key)
            if heap and fresh > heap[0]:
                heapq.heappush(heap, fresh)
                continue
            best = pool[i]
            taken += 1
            out.append(best)
            levels.update((x.dimension, x.level) for x in best.preferences)
            dims.update(x.dimension for x in best.preferences)
            group = members[key]
            group.popleft()
            if group:
                heapq.heappush(heap, (crowding(pool[group[0]]), group[0], key))
    return out
