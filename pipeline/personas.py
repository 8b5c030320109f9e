"""Stage 1 — personas: load the persona library and sample from it, seeded and stratified."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.config import PersonaConfig, resolve_path
from pipeline.records import Persona, Question


class PersonaFileError(ValueError):
    """Bad persona or question data; the message names file, line and field."""


def _files(paths: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(resolve_path, paths):
        if p.is_dir():
            out += sorted(
                f for f in p.iterdir() if f.suffix in {".jsonl", ".yaml", ".yml", ".json"}
            )
        elif p.exists():
            out.append(p)
        else:
            raise PersonaFileError(f"{p}: no such file or folder")
    return out


def read_records(path: Path) -> list[tuple[int, dict]]:
    """(line, record) pairs from a JSONL file, or a YAML/JSON file holding a list."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PersonaFileError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if path.suffix == ".jsonl":
        out = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise PersonaFileError(f"{path}:{lineno}: broken JSON: {e.msg}") from None
            if not isinstance(obj, dict):
                raise PersonaFileError(f"{path}:{lineno}: a record must be a JSON object")
            out.append((lineno, obj))
        return out
    try:
        data = yaml.safe_load(text) or []
    except yaml.YAMLError as e:
        raise PersonaFileError(f"{path}: malformed YAML/JSON: {e}") from None
    if not isinstance(data, list):
        raise PersonaFileError(f"{path}: expected a list of records")
    return [(i, obj) for i, obj in enumerate(data, 1)]


def _parse(path: Path, lineno: int, obj: dict, model: type[BaseModel]):
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<record>"
        rid = obj.get("persona_id") or obj.get("question_id") or "?"
        raise PersonaFileError(
            f"{path}:{lineno}: record {rid!r}: field {field}: {err['msg']}"
        ) from None


def load_personas(paths: Iterable[str | Path]) -> list[Persona]:
    personas = [_parse(f, n, obj, Persona) for f in _files(paths) for n, obj in read_records(f)]
    if not personas:
        raise PersonaFileError(f"no personas found in {', '.join(map(str, paths))}")
    return personas


def load_questions(paths: Iterable[str | Path]) -> list[Question]:
    return [_parse(f, n, obj, Question) for f in _files(paths) for n, obj in read_records(f)]


def sample_personas(personas: list[Persona], cfg: PersonaConfig, seed: int) -> list[Persona]:
    """`per_category` personas from each configured category, the same for the same seed.

    Within a category, personas are drawn round-robin over the preference dimensions they
    cover least so far, so the sample spreads over the taxonomy rather than clustering.
    """
    rng = random.Random(f"personas:{seed}")
    out: list[Persona] = []
    for category in cfg.categories:
        pool = sorted((p for p in personas if p.category == category), key=lambda p: p.persona_id)
        if not pool:
            raise PersonaFileError(f"no personas of category {category!r} in the library")
        rng.shuffle(pool)
        covered: dict[str, int] = {}
        chosen: list[Persona] = []
        while pool and len(chosen) < cfg.per_category:
            # prefer the persona whose dimensions are least covered so far; ties keep shuffle order
            best = min(
                pool,
                key=lambda p: (
                    sum(covered.get(pref.dimension, 0) for pref in p.preferences)
                    / max(1, len(p.preferences))
                ),
            )
            pool.remove(best)
            chosen.append(best)
            for pref in best.preferences:
                covered[pref.dimension] = covered.get(pref.dimension, 0) + 1
        out += chosen
    return out
