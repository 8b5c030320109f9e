"""Reading persona and question files: the library's JSONL (or hand-written YAML/JSON), the
preference taxonomy, and the errors that name the file, line and field.

Shared by the build and `prb personas validate`: `scan_records` reports every broken line,
`read_records` stops at the first one (a build must not start on bad data).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import BaseModel, ValidationError

from pipeline.errors import PrbError
from pipeline.paths import resolve_path
from pipeline.records import Persona, Question
from pipeline.strict import StrictLoader, load_json, load_yaml

log = logging.getLogger("prb.personas")

TAXONOMY_PATH = "personas/taxonomy.yaml"
DATA_SUFFIXES = {".jsonl", ".yaml", ".yml", ".json"}


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
            found = sorted(f for f in p.iterdir() if f.suffix in DATA_SUFFIXES)
            if not found:
                raise PersonaFileError(
                    f"{p}: no persona or question files in this folder "
                    f"({', '.join(sorted(DATA_SUFFIXES))})"
                )
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise PersonaFileError(f"{p}: no such file or folder")
    return out


def jsonl_records(path: Path) -> Iterator[tuple[int, int, dict | None, str | None]]:
    """(line number, byte offset, record or None, problem or None) per non-blank JSONL line,
    read line by line so that a large file is never in memory whole."""
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            start, offset = offset, offset + len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:  # this line only: the rest is still checked
                yield lineno, start, None, _not_utf8(path, lineno, e)
                continue
            if lineno == 1:  # a byte-order mark, as CSV and JSON sources accept it
                line = line.removeprefix("\ufeff")
            if not line.strip():
                continue
            try:
                obj = load_json(line)
            except json.JSONDecodeError as e:
                yield (
                    lineno,
                    start,
                    None,
                    f"{path}:{lineno}: broken JSON: {e.msg} (column {e.colno})",
                )
                continue
            except ValueError as e:  # a key given twice
                yield lineno, start, None, f"{path}:{lineno}: {e}: keep one"
                continue
            if isinstance(obj, dict):
                yield lineno, start, obj, None
            else:
                yield lineno, start, None, f"{path}:{lineno}: a record must be a JSON object"


def _not_utf8(path: Path, lineno: int, e: UnicodeDecodeError) -> str:
    return (
        f"{path}:{lineno}: not UTF-8 text ({e.reason} at column {e.start + 1}): save the "
        "file as UTF-8"
    )


def scan_records(path: Path) -> tuple[list[tuple[int, dict]], list[str]]:
    """(line, record) pairs from a JSONL file or a YAML/JSON list, plus one message per
    unreadable line. Line numbers are real ones in YAML too, so errors point at the record."""
    records: list[tuple[int, dict]] = []
    problems: list[str] = []
    if path.suffix == ".jsonl":
        try:
            for lineno, _, obj, problem in jsonl_records(path):
                if problem:
                    problems.append(problem)
                else:
                    records.append((lineno, obj))
        except OSError as e:
            return [], [f"{path}: cannot read: {e}"]
        if not records and not problems:
            problems.append(f"{path}: the file is empty: add records (see personas/README.md)")
        return records, problems
    try:
        data = path.read_bytes()
    except OSError as e:
        return [], [f"{path}: cannot read: {e}"]
    bad = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad.append(_not_utf8(path, lineno, e))
    if bad:
        return [], bad
    text = data.decode("utf-8")
    if not text.strip():
        return [], [f"{path}: the file is empty: add records (see personas/README.md)"]
    try:
        node = yaml.compose(text, Loader=StrictLoader)
        data = load_yaml(text)
    except yaml.YAMLError as e:
        return [], [f"{path}: malformed YAML/JSON: {e}"]
    if data is None:
        return [], [f"{path}: the file holds no records: add some (see personas/README.md)"]
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


def parse_record(path: Path, lineno: int, obj: dict, model: type[BaseModel]):
    parsed, errors = schema_errors(obj, model)
    if errors:
        field, msg = errors[0]
        raise PersonaFileError(f"{path}:{lineno}: record {record_id(obj)!r}: field {field}: {msg}")
    return parsed


def load_personas(paths: Iterable[str | Path]) -> list[Persona]:
    paths = list(paths)
    found = [
        parse_record(f, n, obj, Persona) for f in data_files(paths) for n, obj in read_records(f)
    ]
    if not found:
        raise PersonaFileError(f"no personas found in {', '.join(map(str, paths))}")
    return found


def load_questions(paths: Iterable[str | Path]) -> list[Question]:
    return [
        parse_record(f, n, obj, Question) for f in data_files(paths) for n, obj in read_records(f)
    ]
