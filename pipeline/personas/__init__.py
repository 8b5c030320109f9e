"""Stage 1 — personas: load the persona library (or an imported source) and sample from it,
seeded and stratified by category and by preference dimension/level.

Reading is shared with `prb personas validate`: `scan_records` reports every broken line,
`read_records` stops at the first one (a build must not start on bad data).
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
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config import PersonaConfig, resolve_path
from pipeline.errors import PrbError
from pipeline.records import Persona, Question

log = logging.getLogger("prb.personas")

TAXONOMY_PATH = "personas/taxonomy.yaml"
DATA_SUFFIXES = {".jsonl", ".yaml", ".yml", ".json"}
P = TypeVar("P")  # a Persona or a PoolPersona: the sampler reads id, category and levels


class PersonaFileError(PrbError, ValueError):
    """Bad persona or question data; the message names file, line and field."""


# --- taxonomy ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Taxonomy:
    """Preference dimensions and their mutually contradicting levels (personas/taxonomy.yaml)."""

    descriptions: dict[str, str]  # dimension -> what it is about
    levels: dict[str, dict[str, str]]  # dimension -> level -> what a user on that level wants

    @property
    def dimensions(self) -> list[str]:
        return list(self.levels)


def load_taxonomy(path: str | Path = TAXONOMY_PATH) -> Taxonomy:
    path = resolve_path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise PersonaFileError(f"{path}: cannot read taxonomy: {e}") from None
    dims = data.get("dimensions") if isinstance(data, dict) else None
    if not isinstance(dims, dict) or not dims:
        raise PersonaFileError(f"{path}: expected a mapping `dimensions:`")
    descriptions, levels = {}, {}
    for name, spec in dims.items():
        lv = spec.get("levels") if isinstance(spec, dict) else None
        # one level cannot contradict anything: a dimension needs at least two
        if not isinstance(lv, dict) or len(lv) < 2:
            raise PersonaFileError(f"{path}: dimension {name!r} needs at least two levels")
        descriptions[name] = str(spec.get("description", ""))
        levels[name] = {str(k): str(v) for k, v in lv.items()}
    return Taxonomy(descriptions, levels)


# --- reading files ----------------------------------------------------------------------------


def data_files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(resolve_path, paths):
        if p.is_dir():
            out += sorted(f for f in p.iterdir() if f.suffix in DATA_SUFFIXES)
        elif p.exists():
            out.append(p)
        else:
            raise PersonaFileError(f"{p}: no such file or folder")
    return out


def _jsonl_records(path: Path) -> Iterator[tuple[int, int, dict | None, str | None]]:
    """(line number, byte offset, record or None, problem or None) per non-blank JSONL line,
    read line by line so that a large file is never in memory whole."""
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            start, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield (
                    lineno,
                    start,
                    None,
                    f"{path}: not UTF-8 text ({e.reason} at byte {start + e.start})",
                )
                return
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                yield (
                    lineno,
                    start,
                    None,
                    f"{path}:{lineno}: broken JSON: {e.msg} (column {e.colno})",
                )
                continue
            if isinstance(obj, dict):
                yield lineno, start, obj, None
            else:
                yield lineno, start, None, f"{path}:{lineno}: a record must be a JSON object"


def scan_records(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """(line, record) pairs from a JSONL file or a YAML/JSON list, plus one message per
    unreadable line. Line numbers are real ones in YAML too, so errors point at the record."""
    records: list[tuple[int, dict]] = []
    problems: list[str] = []
    if path.suffix == ".jsonl":
        try:
            for lineno, _, obj, problem in _jsonl_records(path):
                if problem:
                    problems.append(problem)
                else:
                    records.append((lineno, obj))
        except OSError as e:
            return [], [f"{path}: cannot read: {e}"]
        return records, problems
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        return [], [f"{path}: not UTF-8 text ({e.reason} at byte {e.start})"]
    except OSError as e:
        return [], [f"{path}: cannot read: {e}"]
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        return [], [f"{path}: malformed YAML/JSON: {e}"]
    if data is None:
        return [], []
    if not isinstance(data, list):
        return [], [f"{path}: expected a list of records"]
    for item, obj in zip(node.value, data, strict=True):
        lineno = item.start_mark.line + 1
        if isinstance(obj, dict):
            records.append((lineno, obj))
        else:
            problems.append(f"{path}:{lineno}: a record must be a mapping")
    return records, problems


def read_records(path: Path) -> list[tuple[int, dict]]:
    records, problems = scan_records(path)
    if problems:
        raise PersonaFileError(problems[0])
    return records


def schema_errors(obj: dict, model: type[BaseModel]) -> tuple[BaseModel | None, list[tuple]]:
    """The parsed record, or None and every (field, message) pydantic found."""
    try:
        return model.model_validate(obj), []
    except ValidationError as e:
        return None, [
            (".".join(str(p) for p in err["loc"]) or "<record>", err["msg"]) for err in e.errors()
        ]


def record_id(obj: dict) -> str:
    return str(obj.get("persona_id") or obj.get("question_id") or "?")


def _parse(path: Path, lineno: int, obj: dict, model: type[BaseModel]):
    parsed, errors = schema_errors(obj, model)
    if errors:
        field, msg = errors[0]
        raise PersonaFileError(f"{path}:{lineno}: record {record_id(obj)!r}: field {field}: {msg}")
    return parsed


def load_personas(paths: Iterable[str | Path]) -> list[Persona]:
    paths = list(paths)
    found = [_parse(f, n, obj, Persona) for f in data_files(paths) for n, obj in read_records(f)]
    if not found:
        raise PersonaFileError(f"no personas found in {', '.join(map(str, paths))}")
    return found


def load_questions(paths: Iterable[str | Path]) -> list[Question]:
    return [_parse(f, n, obj, Question) for f in data_files(paths) for n, obj in read_records(f)]


# --- where a build gets its personas ----------------------------------------------------------


def source_digests(cfg: PersonaConfig) -> dict[str, str]:
    """A digest of every file the personas and questions stages read, by path: a run's stage
    files were made from these bytes, so a resume must find them unchanged. A hub source is
    named, not hashed (reading it would need the network)."""
    import hashlib

    if cfg.source.startswith("hf:"):
        return {cfg.source: "hub dataset (not hashed)"}
    if cfg.source == "library":
        files = data_files([*cfg.library, *cfg.questions])
    else:
        files = [resolve_path(cfg.source)]
    out = {}
    for path in files:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError as e:
            raise PersonaFileError(f"{path}: cannot read: {e.strerror}") from None
        out[str(path)] = h.hexdigest()[:16]
    return out


def source_personas(cfg: PersonaConfig) -> list[Persona]:
    """The persona pool for a build: the library, or an imported LaMP-QA/PRB-style source."""
    if cfg.source == "library":
        return load_personas(cfg.library)
    from pipeline.personas.importer import load_external

    return load_external(cfg.source)[0]


def source_questions(cfg: PersonaConfig) -> list[Question]:
    if cfg.source == "library":
        return load_questions(cfg.questions)
    from pipeline.personas.importer import load_external

    return load_external(cfg.source)[1]


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
        for lineno, at, obj, problem in _jsonl_records(path):
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
            p = _parse(f, lineno, obj, Persona)
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
            yield _parse(pick.path, pick.lineno, obj, Persona)


def sampled(cfg: PersonaConfig, seed: int) -> Iterable[Persona]:
    """A build's sample, in pick order. From the library, the pool is scanned as PoolPersonas
    and only the picks are read back whole (a generator: the stage writes them as they come);
    an imported source is loaded whole."""
    if cfg.source == "library":
        return read_back(sample_personas(scan_pool(cfg.library), cfg, seed))
    return sample_personas(source_personas(cfg), cfg, seed)


# --- sampling ---------------------------------------------------------------------------------


def sample_personas(personas: Sequence[P], cfg: PersonaConfig, seed: int) -> list[P]:
    """`per_category` personas from each configured category, the same for the same seed.

    Within a category each next persona is the one whose preference levels are least covered
    by the sample so far (then whose dimensions are), so the sample spreads over contradicting
    levels of every dimension instead of clustering; ties keep a seeded shuffle order.
    `personas` are Persona records or the sampler's PoolPersona view of them.
    """
    rng = random.Random(f"personas:{seed}")
    out: list[Persona] = []
    for category in cfg.categories:
        pool = sorted((p for p in personas if p.category == category), key=lambda p: p.persona_id)
        if not pool:
            raise PersonaFileError(f"no personas of category {category!r} in the source")
        if len(pool) < cfg.per_category:
            log.warning(
                "only %d personas of %s for per_category=%d", len(pool), category, cfg.per_category
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
        while heap and taken < cfg.per_category:
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
